package scheduler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// Each phase is due exactly at batch start − offset: a tick a microsecond
// before emits nothing, the tick at the time emits phase-due once, later
// ticks nothing more. Phases of a batch still running its init wait.
func TestPhasesAreDueExactlyAtTheirOffsets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{init: true})
	f.load("mailbox-move", 1, members(3, start))
	f.clock.Set(start.Add(-60 * time.Minute)) // notify is due, but the batch runs its init
	f.tick()
	if got := f.ids(runbook.EventPhaseDue); len(got) != 0 {
		t.Fatalf("phase-due before init finished: %v", got)
	}
	f.activate(1)
	f.clock.Set(start.Add(-61 * time.Minute))

	phases := []struct {
		name   string
		offset time.Duration
		wantID string
	}{
		{"notify", -60 * time.Minute, "phase-due/1"},
		{"migrate", 0, "phase-due/2"},
		{"cleanup", 24 * time.Hour, "phase-due/3"},
	}
	var want []string
	for _, ph := range phases {
		due := start.Add(ph.offset)
		f.clock.Set(due.Add(-time.Microsecond))
		f.tick()
		equal(t, "before "+ph.name, f.ids(runbook.EventPhaseDue), want)
		f.clock.Set(due)
		f.tick()
		f.tick()
		want = append(want, ph.wantID)
		equal(t, "at "+ph.name, f.ids(runbook.EventPhaseDue), want)
		equal(t, ph.name, f.strs(`SELECT status || ' ' || (dispatched_at = $2) FROM phase_executions WHERE phase_name = $1`,
			ph.name, due), []string{"dispatched true"})
	}

	body := f.messages(runbook.EventPhaseDue)[1].Body
	if body["phaseName"] != "migrate" || body["offsetMinutes"] != 0.0 || body["dueAt"] != "2025-03-15T00:00:00Z" ||
		body["phaseExecutionId"] != 2.0 || body["batchId"] != 1.0 {
		t.Fatalf("phase-due %v", body)
	}
	if ids, _ := body["memberIds"].([]any); len(ids) != 3 || ids[0] != 1.0 || ids[1] != 2.0 || ids[2] != 3.0 {
		t.Fatalf("memberIds %v", body["memberIds"])
	}
	// Every active member got every step of the phase, with rendered params
	// and the step's settings.
	equal(t, "migrate steps", f.strs(`SELECT batch_member_id || ' ' || step_index || ' ' || step_name || ' ' || kind || ' '
		|| worker_id || ' ' || function_name || ' ' || status || ' ' || is_poll_step || ' ' || coalesce(poll_interval_sec::text, '-')
		|| ' ' || coalesce(poll_timeout_sec::text, '-') || ' ' || on_failure || ' ' || params_json::text
		FROM step_executions WHERE phase_execution_id = 2 AND batch_member_id = 1 ORDER BY step_index`),
		[]string{
			`1 0 start-move phase exchange start_move pending true 60 3600 undo {"batch": "1", "target": "db-u01", "mailbox": "u01@contoso.com", "retries": 3}`,
			`1 1 finish-move phase exchange finish_move pending false - -  {"mailbox": "u01"}`,
		})
	if n := f.count(`SELECT count(*) FROM step_executions`); n != 3*1+3*2+3*1 {
		t.Fatalf("%d step executions, want 12", n)
	}
}

// A member whose params do not render (a column without a value) gets its
// steps of the phase created failed, with the error, and the failure is
// logged; the other members' steps are pending and the phase goes out.
func TestMemberWhoseParamsDoNotRenderGetsFailedSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	broken := runbook.Member{Key: "u02", BatchTime: start, Values: map[string]string{"email": "u02@contoso.com"}} // no target
	f.load("mailbox-move", 1, []runbook.Member{mbr("u01", start), broken, mbr("u03", start)})
	f.clock.Set(start)
	f.tick()

	equal(t, "phase-due", f.ids(runbook.EventPhaseDue), []string{"phase-due/1", "phase-due/2"})
	if ids, _ := f.messages(runbook.EventPhaseDue)[1].Body["memberIds"].([]any); len(ids) != 3 {
		t.Fatalf("memberIds %v, want every member (the failed one has rows too)", ids)
	}
	rows := f.strs(`SELECT batch_member_id || ' ' || step_name || ' ' || status || ' ' || coalesce(error_message, '')
		FROM step_executions WHERE phase_execution_id = 2 ORDER BY batch_member_id, step_index`)
	if len(rows) != 6 {
		t.Fatalf("rows %q", rows)
	}
	for i, prefix := range []string{
		"1 start-move pending ", "1 finish-move pending ",
		"2 start-move failed step start-move: params do not render: params.target: no value for {{ target }}",
		"2 finish-move failed not run: another step of the member in this phase failed: step start-move",
		"3 start-move pending ", "3 finish-move pending ",
	} {
		if !strings.HasPrefix(rows[i], prefix) {
			t.Errorf("row %d = %q, want prefix %q", i, rows[i], prefix)
		}
	}
	// notify does not use target: u02's notice is pending.
	equal(t, "notify", f.strs(`SELECT status FROM step_executions WHERE phase_execution_id = 1 AND batch_member_id = 2`),
		[]string{"pending"})
	logged := f.logs.find("member params do not render; its steps are failed")
	if len(logged) != 1 || logged[0][keyMemberKey] != "u02" || logged[0][keyPhase] != "migrate" || logged[0][keyBatchID] != "1" ||
		logged[0]["level"] != "WARN" {
		t.Fatalf("logged %v", logged)
	}
}

// A member the batch still lists but whose data left the batch time gets no
// steps (it is being removed), and is not in memberIds.
func TestMemberLeavingTheBatchGetsNoSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	f.load("mailbox-move", 1, members(2, start))
	f.tick()
	// As if the member pass had not run yet: u02's data moved away, its row is active.
	f.exec(`UPDATE "runbook_mailbox_move_v1" SET _batch_time = $1 WHERE _member_key = 'u02'`, start.Add(time.Hour))
	f.clock.Set(start.Add(-time.Hour))
	if err := f.sched.phases(f.ctx, f.clock.Now(), mustGet(f, "mailbox-move")); err != nil {
		t.Fatal(err)
	}
	if ids, _ := f.messages(runbook.EventPhaseDue)[0].Body["memberIds"].([]any); len(ids) != 1 || ids[0] != 1.0 {
		t.Fatalf("memberIds %v, want [1]", ids)
	}
}

func mustGet(f *fixture, name string) *runbook.StoredRunbook {
	f.t.Helper()
	sr, err := f.runbooks.Get(f.ctx, name, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return sr
}

// The offset's sign is seed 003's: its phase-due example has offsetMinutes
// 7200 due 2025-03-10T00:00:00Z on a batch starting 2025-03-15T00:00:00Z,
// five days before. A negative offset falls after the start.
func TestPhaseOffsetsCountMinutesBeforeTheBatchStart(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	seed := readJSON(t, filepath.Join("testdata", "seed", "phase-due.json"))
	for _, tc := range []struct {
		name   string
		offset int
		want   string
	}{
		{"the seed's pre-notification", int(seed["offsetMinutes"].(float64)), seed["dueAt"].(string)},
		{"at the start", 0, "2025-03-15T00:00:00Z"},
		{"an hour before", 60, "2025-03-14T23:00:00Z"},
		{"a day after", -1440, "2025-03-16T00:00:00Z"},
	} {
		if got := runbook.FormatTime(dueAt(start, tc.offset)); got != tc.want {
			t.Errorf("%s: offset %d is due %s, want %s", tc.name, tc.offset, got, tc.want)
		}
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}
