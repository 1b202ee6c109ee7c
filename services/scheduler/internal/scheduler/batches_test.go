package scheduler

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// A batch time of the member data becomes a batch with its members and a
// pending execution of every phase; with init steps it waits in
// init_dispatched with its init executions and one batch-init, without them
// it is active at once and says nothing. Ticking again changes nothing.
func TestBatchDetection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		init       bool
		wantStatus string
		wantEvents []string
	}{
		{"with init steps", true, runbook.BatchInitDispatched, []string{"batch-init/1/v1"}},
		{"without init steps", false, runbook.BatchActive, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.apply(spec{init: tt.init})
			f.load("mailbox-move", 1, members(3, start))
			now := f.clock.Now()
			f.tick()
			f.tick()

			var (
				status             string
				detected, initAt   *time.Time
				runbookID, version int64
			)
			if err := f.pool.QueryRow(f.ctx, `SELECT b.status, b.detected_at, b.init_dispatched_at, b.runbook_id, r.version
				FROM batches b JOIN runbooks r ON r.id = b.runbook_id WHERE b.id = 1 AND b.batch_start_time = $1`, start).
				Scan(&status, &detected, &initAt, &runbookID, &version); err != nil {
				t.Fatal(err)
			}
			if status != tt.wantStatus || !detected.Equal(now) || (initAt != nil) != tt.init || initAt != nil && !initAt.Equal(now) || version != 1 {
				t.Fatalf("batch: status %s detected %v init_dispatched_at %v version %d", status, detected, initAt, version)
			}
			equal(t, "members", f.strs(`SELECT member_key || ' ' || status || ' ' || (add_dispatched_at IS NULL)
				FROM batch_members WHERE batch_id = 1 ORDER BY id`),
				[]string{"u01 active true", "u02 active true", "u03 active true"})
			equal(t, "phases", f.strs(`SELECT phase_name || ' ' || offset_minutes || ' ' || status || ' v' || runbook_version
				|| ' ' || to_char(due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI') FROM phase_executions WHERE batch_id = 1 ORDER BY due_at`),
				[]string{"notify 60 pending v1 2025-03-14T23:00", "migrate 0 pending v1 2025-03-15T00:00",
					"cleanup -1440 pending v1 2025-03-16T00:00"})
			wantInit := []string(nil)
			if tt.init {
				wantInit = []string{`create-endpoint 0 v1 exchange create_endpoint pending {"batch": "1", "starts": "2025-03-15T00:00:00Z"}`}
			}
			equal(t, "init executions", f.strs(`SELECT step_name || ' ' || step_index || ' v' || runbook_version || ' ' || worker_id
				|| ' ' || function_name || ' ' || status || ' ' || params_json::text FROM init_executions ORDER BY id`), wantInit)
			equal(t, "events", f.ids(""), tt.wantEvents)
			if tt.init {
				body := f.messages(runbook.EventBatchInit)[0].Body
				if body["memberCount"] != 3.0 || body["batchStartTime"] != "2025-03-15T00:00:00Z" || body["runbookVersion"] != 1.0 {
					t.Fatalf("batch-init %v", body)
				}
			}
		})
	}
}

// Each batch time is its own batch; one that appears later is detected then.
func TestBatchDetectionFindsEveryBatchTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{init: true})
	later := start.Add(7 * 24 * time.Hour)
	f.load("mailbox-move", 1, append(members(2, start), mbr("w01", later)))
	f.tick()
	equal(t, "events", f.ids(runbook.EventBatchInit), []string{"batch-init/1/v1", "batch-init/2/v1"})
	third := start.Add(14 * 24 * time.Hour)
	f.load("mailbox-move", 1, append(append(members(2, start), mbr("w01", later)), mbr("x01", third)))
	f.tick()
	equal(t, "events", f.ids(runbook.EventBatchInit), []string{"batch-init/1/v1", "batch-init/2/v1", "batch-init/3/v1"})
	if got := f.count(`SELECT count(*) FROM batch_members WHERE batch_id = $1`, f.batchID(third)); got != 1 {
		t.Fatalf("third batch has %d members, want 1", got)
	}
}

// Init poll settings are copied to the init executions.
func TestBatchDetectionCopiesInitPollSettings(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{init: true, pollInit: true})
	f.load("mailbox-move", 1, members(1, start))
	f.tick()
	equal(t, "init poll settings", f.strs(`SELECT is_poll_step || ' ' || poll_interval_sec || ' ' || poll_timeout_sec
		FROM init_executions`), []string{"true 30 600"})
}
