package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/runbook"
)

// Several schedulers ticking at once on one database emit every fact exactly
// once: the same facts as a single scheduler, no event decided twice, no
// tick failing, one step execution per member, phase and step.
func TestConcurrentSchedulersEmitEveryFactOnce(t *testing.T) {
	t.Parallel()
	alone := setup(t)
	scenario(alone, []*Scheduler{alone.newScheduler(3)})
	together := setup(t)
	// Small batches: each tick does part of the work, so claims overlap.
	scheds := []*Scheduler{together.newScheduler(3), together.newScheduler(3), together.newScheduler(3)}
	scenario(together, scheds)

	want := alone.facts()
	if len(want) != 41 {
		t.Fatalf("the scenario produced %d facts, want 41:\n%s", len(want), strings.Join(want, "\n"))
	}
	equal(t, "facts of three schedulers vs one", together.facts(), want)
	for i, s := range scheds {
		if n := s.duplicates.Load(); n != 0 {
			t.Errorf("scheduler %d decided %d events twice", i, n)
		}
	}
	if n := together.count(`SELECT count(*) FROM (SELECT 1 FROM step_executions
		GROUP BY phase_execution_id, batch_member_id, step_index HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%d step executions created twice", n)
	}
	// Each member's events alternate added/removed and end in its status.
	rows := together.strs(`SELECT (convert_from(body, 'UTF8')::jsonb->>'batchMemberId') || ' ' || (properties->>'MessageType') FROM outbox
		WHERE properties->>'MessageType' IN ('member-added', 'member-removed') ORDER BY id`)
	last := map[string]string{}
	for _, r := range rows {
		var id, typ string
		fmt.Sscan(r, &id, &typ)
		if last[id] == typ {
			t.Errorf("member %s: %s twice in a row", id, typ)
		}
		last[id] = typ
	}
	for id, typ := range last {
		want := map[string]string{runbook.EventMemberAdded: "active", runbook.EventMemberRemoved: "removed"}[typ]
		equal(t, "member "+id, together.strs(`SELECT status FROM batch_members WHERE id = $1::bigint`, id), []string{want})
	}
}

// scenario drives a runbook through detection, init polling, member changes,
// due phases, step polling and a version transition with rerun_init, each
// step ticked by scheds until nothing changes any more.
func scenario(f *fixture, scheds []*Scheduler) {
	t := f.t
	second := start.Add(48 * time.Hour)
	settle := func() { f.settle(scheds) }
	at := func(t time.Time) { f.clock.Set(t); settle() }

	f.apply(spec{init: true, pollInit: true})
	v1 := append(members(10, start), members(10, second)...)
	for i := 10; i < 20; i++ {
		v1[i].Key = fmt.Sprintf("w%02d", i)
	}
	f.load("mailbox-move", 1, v1)
	at(start.Add(-3 * time.Hour))

	// The orchestrator runs the init steps: they poll once, then succeed.
	f.exec(`UPDATE init_executions SET status = 'polling', poll_started_at = $1, last_polled_at = $1`, f.clock.Now())
	at(f.clock.Now().Add(30 * time.Second))
	f.exec(`UPDATE init_executions SET status = 'succeeded'`)
	f.exec(`UPDATE batches SET status = 'active'`)

	// Members change: u11 and u12 join, u03 leaves.
	changed := slices.DeleteFunc(append(slices.Clone(v1), mbr("u11", start), mbr("u12", start)),
		func(m runbook.Member) bool { return m.Key == "u03" })
	f.load("mailbox-move", 1, changed)
	at(f.clock.Now().Add(time.Minute))

	at(start.Add(-60 * time.Minute)) // notify of the first batch

	// u03 comes back, u12 leaves again.
	changed = append(slices.Clone(v1), mbr("u11", start))
	f.load("mailbox-move", 1, changed)
	at(f.clock.Now().Add(time.Minute))

	at(start) // migrate of the first batch

	// The orchestrator dispatched start-move to every member: it polls.
	f.exec(`UPDATE step_executions SET status = 'polling', poll_started_at = $1, last_polled_at = $1
		WHERE step_name = 'start-move'`, start.Add(time.Second))
	at(start.Add(61 * time.Second))
	f.exec(`UPDATE step_executions SET last_polled_at = $1, poll_count = poll_count + 1 WHERE step_name = 'start-move'`,
		start.Add(70*time.Second))
	at(start.Add(130 * time.Second))

	// Version 2 takes over the live batches and runs its init again.
	f.apply(spec{version: 2, init: true, rerunInit: true})
	f.load("mailbox-move", 2, changed)
	at(start.Add(5 * time.Minute))
	f.exec(`UPDATE batches SET status = 'active'`)

	at(second.Add(-60 * time.Minute))
	at(second)
	at(second.Add(24 * time.Hour))
	if n := f.count(`SELECT count(*) FROM phase_executions WHERE status = 'pending'`); n != 0 {
		t.Fatalf("%d phases still pending at the end", n)
	}
}

// settle ticks every scheduler at once, round after round, until a round
// changes nothing.
func (f *fixture) settle(scheds []*Scheduler) {
	f.t.Helper()
	before := f.signature()
	for range 30 {
		var wg sync.WaitGroup
		errs := make([]error, len(scheds))
		for i, s := range scheds {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.Tick(f.ctx) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				f.t.Fatalf("scheduler %d at %s: %v", i, runbook.FormatTime(f.clock.Now()), err)
			}
		}
		after := f.signature()
		if after == before {
			return
		}
		before = after
	}
	f.t.Fatal("the schedulers did not settle")
}

// signature summarizes the rows the scheduler writes.
func (f *fixture) signature() string {
	f.t.Helper()
	return f.strs(`SELECT concat_ws(' ',
		(SELECT count(*) FROM outbox), (SELECT count(*) FROM step_executions), (SELECT count(*) FROM init_executions),
		(SELECT string_agg(id || status || runbook_id, ',' ORDER BY id) FROM batches),
		(SELECT string_agg(id || status, ',' ORDER BY id) FROM phase_executions),
		(SELECT string_agg(id || status, ',' ORDER BY id) FROM batch_members),
		(SELECT string_agg(id || coalesce(poll_checked_at::text, '-'), ',' ORDER BY id) FROM step_executions))`)[0]
}

// facts are the events emitted, described without database ids (which
// depend on the order concurrent transactions ran in), sorted.
func (f *fixture) facts() []string {
	f.t.Helper()
	starts := map[float64]string{}
	for _, r := range f.strs(`SELECT id || ' ' || to_char(batch_start_time AT TIME ZONE 'UTC', 'MM-DD"T"HH24:MI') FROM batches`) {
		var id float64
		var at string
		fmt.Sscan(r, &id, &at)
		starts[id] = at
	}
	var out []string
	for _, m := range f.messages("") {
		b := m.Body
		batch := starts[b["batchId"].(float64)]
		var fact string
		switch m.Properties[topology.PropertyMessageType] {
		case runbook.EventBatchInit:
			fact = fmt.Sprintf("batch-init %s v%v members %v", batch, b["runbookVersion"], b["memberCount"])
		case runbook.EventPhaseDue:
			fact = fmt.Sprintf("phase-due %s v%v %s due %s members %d", batch, b["runbookVersion"], b["phaseName"], b["dueAt"],
				len(b["memberIds"].([]any)))
		case runbook.EventMemberAdded, runbook.EventMemberRemoved:
			fact = fmt.Sprintf("%s %s %s", m.Properties[topology.PropertyMessageType], batch, b["memberKey"])
		case runbook.EventPollCheck:
			owner := "init"
			if id, ok := b["stepExecutionId"]; ok {
				owner = f.strs(`SELECT bm.member_key FROM step_executions se JOIN batch_members bm ON bm.id = se.batch_member_id
					WHERE se.id = $1::bigint`, fmt.Sprint(id))[0]
			}
			fact = fmt.Sprintf("poll-check %s v%v %s %s #%v", batch, b["runbookVersion"], b["stepName"], owner, b["pollCount"])
		default:
			f.t.Fatalf("unknown event %+v", m)
		}
		out = append(out, fact)
	}
	slices.Sort(out)
	return out
}
