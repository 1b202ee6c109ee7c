package runbook

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// batchRows writes execution rows the way the scheduler and the orchestrator
// would, for the read side to report.
type batchRows struct {
	f  fixture
	t  testing.TB
	rb *StoredRunbook
}

func (b batchRows) batch(start time.Time, status string) int64 {
	b.t.Helper()
	var id int64
	if err := b.f.pool.QueryRow(b.f.ctx, `INSERT INTO batches (runbook_id, runbook_name, batch_start_time, status)
		VALUES ($1, $2, $3, $4) RETURNING id`, b.rb.ID, b.rb.Runbook.Name, start, status).Scan(&id); err != nil {
		b.t.Fatal(err)
	}
	return id
}

func (b batchRows) member(batchID int64, key, status string) int64 {
	b.t.Helper()
	var id int64
	if err := b.f.pool.QueryRow(b.f.ctx, `INSERT INTO batch_members (batch_id, member_key, status) VALUES ($1, $2, $3) RETURNING id`,
		batchID, key, status).Scan(&id); err != nil {
		b.t.Fatal(err)
	}
	return id
}

func (b batchRows) phase(batchID int64, name string, offset int, due time.Time, version int, status string) int64 {
	b.t.Helper()
	var id int64
	if err := b.f.pool.QueryRow(b.f.ctx, `INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at,
		runbook_version, status) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		batchID, name, offset, due, version, status).Scan(&id); err != nil {
		b.t.Fatal(err)
	}
	return id
}

func (b batchRows) step(phaseID, memberID int64, kind, status string) {
	b.t.Helper()
	if _, err := b.f.pool.Exec(b.f.ctx, `INSERT INTO step_executions (phase_execution_id, batch_member_id, kind, step_name,
		step_index, worker_id, function_name, params_json, status) VALUES ($1, $2, $3, 'send-notice', 0, 'mailer', 'send_email', '{}', $4)`,
		phaseID, memberID, kind, status); err != nil {
		b.t.Fatal(err)
	}
}

func TestBatchesPageNewestFirstWithMemberCounts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w := batchRows{f: f, t: t, rb: f.apply(t, contosoVersion(t, 3, "Move."))}
	other := batchRows{f: f, t: t, rb: f.apply(t, mustParse(t, "name: other\nversion: 1\nphases: [{name: p, offset_minutes: 0, steps: [{name: s, worker_id: w, function: f}]}]\n"))}
	start := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	var ids []int64
	for i := range 5 {
		id := w.batch(start.AddDate(0, 0, i), BatchActive)
		for m := range i {
			w.member(id, string(rune('a'+m)), MemberActive)
		}
		w.member(id, "gone", MemberRemoved)
		ids = append(ids, id)
	}
	other.batch(start, BatchDetected)

	var got []BatchView
	after := int64(0)
	for page := 0; ; page++ {
		list, err := f.store.Batches(f.ctx, "contoso-mailbox-migration", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, list...)
		if len(list) < 2 {
			break
		}
		after = list[len(list)-1].ID
		if page > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(got) != 5 {
		t.Fatalf("listed %d batches, want 5: %+v", len(got), got)
	}
	for i, b := range got {
		want := 4 - i // newest first
		if b.ID != ids[want] || b.RunbookName != "contoso-mailbox-migration" || b.RunbookVersion != 3 ||
			b.RunbookID != w.rb.ID || !b.StartTime.Equal(start.AddDate(0, 0, want)) || b.StartTime.Location() != time.UTC ||
			b.Status != BatchActive || b.DetectedAt.IsZero() || !b.InitDispatchedAt.IsZero() || !b.CompletedAt.IsZero() ||
			b.ActiveMembers != want || b.RemovedMembers != 1 || b.Phases != nil || b.Init != nil {
			t.Fatalf("batch %d: %+v", i, b)
		}
	}
	if list, err := f.store.Batches(f.ctx, "other", 0, 10); err != nil || len(list) != 1 || list[0].RunbookVersion != 1 ||
		list[0].ActiveMembers != 0 {
		t.Fatalf("other runbook: %+v, %v", list, err)
	}
	if _, err := f.store.Batches(f.ctx, "nope", 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown runbook: %v, want ErrNotFound", err)
	}
}

func TestBatchReportsPhasesWithStepCountsAndInitExecutions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	v3 := f.apply(t, contosoVersion(t, 3, "Move."))
	w := batchRows{f: f, t: t, rb: v3}
	start := time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
	id := w.batch(start, BatchActive)
	if _, err := f.pool.Exec(f.ctx, `UPDATE batches SET init_dispatched_at = $2, completed_at = $3 WHERE id = $1`,
		id, start.Add(-time.Hour), start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m1, m2 := w.member(id, "a@contoso.com", MemberActive), w.member(id, "b@contoso.com", MemberActive)
	w.member(id, "c@contoso.com", MemberRemoved)
	// Inserted out of due order: the report orders by due time.
	migrate := w.phase(id, "migrate", 0, start, 3, PhasePending)
	pre := w.phase(id, "pre-notification", 7200, start.Add(-7200*time.Minute), 3, PhaseDispatched)
	w.step(pre, m1, KindPhase, StepSucceeded)
	w.step(pre, m2, KindPhase, StepFailed)
	w.step(pre, m2, KindRollback, StepSucceeded) // a rollback is not a step of the phase
	if _, err := f.pool.Exec(f.ctx, `UPDATE phase_executions SET dispatched_at = $2 WHERE id = $1`, pre, start.Add(-7200*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO init_executions (batch_id, step_name, step_index, runbook_version, worker_id,
		function_name, params_json, status, job_id, error_message, poll_count, dispatched_at) VALUES
		($1, 'second', 1, 3, 'exchange', 'f2', '{}', 'failed', 'j2', 'boom', 2, now()),
		($1, 'create-endpoint', 0, 3, 'exchange', 'create_migration_endpoint', '{}', 'succeeded', 'j1', NULL, 0, now())`, id); err != nil {
		t.Fatal(err)
	}

	b, err := f.store.Batch(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != id || b.RunbookVersion != 3 || b.ActiveMembers != 2 || b.RemovedMembers != 1 ||
		!b.InitDispatchedAt.Equal(start.Add(-time.Hour)) || !b.CompletedAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("batch %+v", b)
	}
	if len(b.Phases) != 2 || b.Phases[0].ID != pre || b.Phases[1].ID != migrate {
		t.Fatalf("phases %+v", b.Phases)
	}
	p := b.Phases[0]
	if p.PhaseName != "pre-notification" || p.OffsetMinutes != 7200 || !p.DueAt.Equal(start.Add(-7200*time.Minute)) ||
		p.RunbookVersion != 3 || p.Status != PhaseDispatched || p.DispatchedAt.IsZero() || !p.CompletedAt.IsZero() ||
		!reflect.DeepEqual(p.Steps, map[string]int{StepSucceeded: 1, StepFailed: 1}) {
		t.Fatalf("pre-notification %+v", p)
	}
	if q := b.Phases[1]; q.Status != PhasePending || !q.DispatchedAt.IsZero() || len(q.Steps) != 0 {
		t.Fatalf("migrate %+v", q)
	}
	if len(b.Init) != 2 {
		t.Fatalf("init %+v", b.Init)
	}
	if e := b.Init[0]; e.StepName != "create-endpoint" || e.StepIndex != 0 || e.RunbookVersion != 3 || e.WorkerID != "exchange" ||
		e.Function != "create_migration_endpoint" || e.Status != StepSucceeded || e.JobID != "j1" || e.Error != "" ||
		e.DispatchedAt.IsZero() || !e.CompletedAt.IsZero() {
		t.Fatalf("init 0 %+v", e)
	}
	if e := b.Init[1]; e.StepName != "second" || e.Status != StepFailed || e.Error != "boom" || e.PollCount != 2 {
		t.Fatalf("init 1 %+v", e)
	}
	if _, err := f.store.Batch(f.ctx, id+1000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown batch: %v, want ErrNotFound", err)
	}
}
