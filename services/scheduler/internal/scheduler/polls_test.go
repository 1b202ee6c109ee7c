package scheduler

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// A polling step or init execution gets poll-check once its interval has
// passed since last_polled_at, exactly once, and the next only after the
// orchestrator polled again (last_polled_at moved, poll_count grew).
func TestPollChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		table    string // the execution table the orchestrator updates
		id       int64
		interval time.Duration
		idKey    string // the body's id field
		wantIDs  []string
	}{
		{"phase step", "step_executions", 2, 60 * time.Second, "stepExecutionId",
			[]string{"poll-check/step/2/1", "poll-check/step/2/2"}},
		{"init step", "init_executions", 1, 30 * time.Second, "initExecutionId",
			[]string{"poll-check/init/1/1", "poll-check/init/1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.apply(spec{init: true, pollInit: true})
			f.load("mailbox-move", 1, members(1, start))
			f.tick()
			f.activate(1)
			f.clock.Set(start) // notify (step execution 1) and migrate are due: start-move, a poll step, is 2
			f.tick()

			// The orchestrator dispatched it and the worker answered "still in progress".
			polled := start.Add(5 * time.Second)
			f.exec(`UPDATE `+tt.table+` SET status = 'polling', poll_started_at = $2, last_polled_at = $2
				WHERE id = $1`, tt.id, polled)
			var want []string
			for round, at := range []time.Time{polled, polled.Add(tt.interval + time.Second)} {
				if round > 0 { // the orchestrator handled the check and polled again
					f.exec(`UPDATE `+tt.table+` SET last_polled_at = $2, poll_count = poll_count + 1 WHERE id = $1`, tt.id, at)
				}
				f.clock.Set(at.Add(tt.interval - time.Microsecond))
				f.tick()
				equal(t, "before the interval", f.ids(runbook.EventPollCheck), want)
				f.clock.Set(at.Add(tt.interval))
				f.tick()
				f.clock.Advance(tt.interval * 3) // no repeat while last_polled_at stays
				f.tick()
				want = append(want, tt.wantIDs[round])
				equal(t, "after the interval", f.ids(runbook.EventPollCheck), want)
			}
			msgs := f.messages(runbook.EventPollCheck)
			body := msgs[1].Body
			wantName := "start-move"
			if tt.table == "init_executions" {
				wantName = "create-endpoint"
			}
			if body[tt.idKey] != float64(tt.id) || body["pollCount"] != 2.0 || body["stepName"] != wantName ||
				body["batchId"] != 1.0 || body["runbookName"] != "mailbox-move" || body["runbookVersion"] != 1.0 || len(body) != 7 {
				t.Fatalf("poll-check %v", body)
			}
			var checked time.Time
			if err := f.pool.QueryRow(f.ctx, `SELECT poll_checked_at FROM `+tt.table+` WHERE id = $1`, tt.id).Scan(&checked); err != nil {
				t.Fatal(err)
			}
			if wantAt := polled.Add(2*tt.interval + time.Second); !checked.Equal(wantAt) {
				t.Fatalf("poll_checked_at %v, want %v", checked, wantAt)
			}
		})
	}
}

// Rows that are not polling get no poll-check, whatever their times say.
func TestPollChecksOnlyForPollingRows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	f.load("mailbox-move", 1, members(1, start))
	f.clock.Set(start)
	f.tick()
	f.exec(`UPDATE step_executions SET status = 'succeeded', last_polled_at = $1 WHERE id = 1`, start)
	f.clock.Advance(time.Hour)
	f.tick()
	if got := f.ids(runbook.EventPollCheck); len(got) != 0 {
		t.Fatalf("poll-check for a finished step: %v", got)
	}
}
