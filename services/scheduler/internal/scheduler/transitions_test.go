package scheduler

import (
	"strconv"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// liveBatchUnderV1 is a batch of three members governed by version 1 (no
// init) at start - 30m: notify dispatched, migrate and cleanup pending.
func liveBatchUnderV1(t *testing.T) *fixture {
	t.Helper()
	f := setup(t)
	f.apply(spec{})
	f.load("mailbox-move", 1, members(3, start))
	f.tick()
	f.clock.Set(start.Add(-30 * time.Minute))
	f.tick()
	equal(t, "v1 phases", f.phaseRows(1), []string{"1/cleanup pending", "1/migrate pending", "1/notify dispatched"})
	return f
}

// When a new version becomes active, live batches move to it: the old
// version's pending phases are skipped and the new version's phases created;
// overdue ones run at once (rerun) or are skipped (ignore); with rerun_init
// the new version's init steps run again and the batch waits for them.
func TestVersionTransitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		v2            spec
		wantPhases    []string
		wantStatus    string
		wantEvents    []string
		wantInit      []string
		ignoreApplied bool
	}{
		{
			name: "rerun runs overdue phases at once",
			v2:   spec{version: 2, overdue: "rerun"},
			wantPhases: []string{"1/cleanup skipped", "1/migrate skipped", "1/notify dispatched",
				"2/cleanup pending", "2/migrate pending", "2/notify dispatched"},
			wantStatus: "active",
			wantEvents: []string{"phase-due/1", "phase-due/4"},
		},
		{
			name: "ignore skips overdue phases",
			v2:   spec{version: 2, overdue: "ignore"},
			wantPhases: []string{"1/cleanup skipped", "1/migrate skipped", "1/notify dispatched",
				"2/cleanup pending", "2/migrate pending", "2/notify skipped"},
			wantStatus:    "active",
			wantEvents:    []string{"phase-due/1"},
			ignoreApplied: true,
		},
		{
			name: "rerun_init runs the new init first",
			v2:   spec{version: 2, overdue: "rerun", init: true, rerunInit: true},
			wantPhases: []string{"1/cleanup skipped", "1/migrate skipped", "1/notify dispatched",
				"2/cleanup pending", "2/migrate pending", "2/notify pending"},
			wantStatus: "init_dispatched",
			wantEvents: []string{"phase-due/1", "batch-init/1/v2"},
			wantInit:   []string{"create-endpoint v2 pending"},
		},
		{
			name: "init steps without rerun_init do not run for live batches",
			v2:   spec{version: 2, overdue: "rerun", init: true},
			wantPhases: []string{"1/cleanup skipped", "1/migrate skipped", "1/notify dispatched",
				"2/cleanup pending", "2/migrate pending", "2/notify dispatched"},
			wantStatus: "active",
			wantEvents: []string{"phase-due/1", "phase-due/4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := liveBatchUnderV1(t)
			v2 := f.apply(tt.v2)
			f.load("mailbox-move", 2, members(3, start))
			f.tick()
			f.tick()
			equal(t, "phases", f.phaseRows(1), tt.wantPhases)
			equal(t, "batch", f.strs(`SELECT status || ' ' || runbook_id FROM batches WHERE id = 1`),
				[]string{tt.wantStatus + " " + itoa(v2.ID)})
			equal(t, "events", f.ids(""), tt.wantEvents)
			equal(t, "init", f.strs(`SELECT step_name || ' v' || runbook_version || ' ' || status FROM init_executions ORDER BY id`),
				tt.wantInit)
			equal(t, "ignore_overdue_applied", f.strs(`SELECT ignore_overdue_applied::text FROM runbooks WHERE id = $1`, v2.ID),
				[]string{boolText(tt.ignoreApplied)})
			if init := f.messages(runbook.EventBatchInit); len(init) == 1 && (init[0].Body["memberCount"] != 3.0 || init[0].Body["runbookVersion"] != 2.0) {
				t.Fatalf("batch-init %v", init[0].Body)
			}
			// The members stay: the new version's data has them.
			if got := f.ids(runbook.EventMemberRemoved); len(got) != 0 {
				t.Fatalf("members removed: %v", got)
			}
			// New phases are due at the new version's offsets.
			equal(t, "v2 migrate due", f.strs(`SELECT (due_at = $1)::text FROM phase_executions WHERE runbook_version = 2 AND phase_name = 'migrate'`, start),
				[]string{"true"})
		})
	}
}

// A version applied but not loaded yet has no members: live batches wait
// for its data instead of losing every member.
func TestTransitionWaitsForTheNewVersionsMemberData(t *testing.T) {
	t.Parallel()
	f := liveBatchUnderV1(t)
	v2 := f.apply(spec{version: 2})
	f.tick()
	equal(t, "batch", f.strs(`SELECT runbook_id::text FROM batches`), []string{"1"})
	if got := f.ids(runbook.EventMemberRemoved); len(got) != 0 {
		t.Fatalf("members removed: %v", got)
	}
	if got := f.logs.find("live batches wait for the member data of the active version"); len(got) == 0 {
		t.Fatal("the wait is not logged")
	}
	f.load("mailbox-move", 2, members(3, start))
	f.tick()
	equal(t, "batch", f.strs(`SELECT runbook_id::text FROM batches`), []string{itoa(v2.ID)})
}

// A batch that comes back to a version that governed it before gets that
// version's skipped phases back (those not overdue, with ignore), and does
// not run that version's init a second time.
func TestReturningToAnEarlierVersionRevivesItsSkippedPhases(t *testing.T) {
	t.Parallel()
	f := liveBatchUnderV1(t)
	f.apply(spec{version: 2})
	f.load("mailbox-move", 2, members(3, start))
	f.tick()
	f.clock.Advance(time.Minute)
	v1 := f.apply(spec{}) // the same YAML again: version 1 is active again
	f.tick()
	equal(t, "batch", f.strs(`SELECT runbook_id::text FROM batches`), []string{itoa(v1.ID)})
	equal(t, "phases", f.phaseRows(1), []string{"1/cleanup pending", "1/migrate pending", "1/notify dispatched",
		"2/cleanup skipped", "2/migrate skipped", "2/notify dispatched"})
	f.clock.Set(start)
	f.tick()
	equal(t, "events", f.ids(runbook.EventPhaseDue), []string{"phase-due/1", "phase-due/4", "phase-due/2"})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
