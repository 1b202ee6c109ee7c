package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
)

const executorRunbook = `name: exec-test
version: 1
data_source: {columns: [email]}
init:
  - {name: prepare, worker_id: exchange, function: prepare_batch, params: {batch: "{{ _batch_id }}"}}
phases:
  - name: notify
    offset_minutes: -60
    steps:
      - {name: send-notice, worker_id: mailer, function: send_email, params: {to: "{{ email }}"}}
      - {name: send-reminder, worker_id: mailer, function: send_email, params: {to: "{{ email }}", again: "yes"}}
  - name: migrate
    offset_minutes: 0
    steps:
      - name: move
        worker_id: exchange
        function: start_move
        params: {mailbox: "{{ email }}"}
        is_poll_step: true
        poll_interval_sec: 60
        poll_timeout_sec: 600
        on_failure: undo
rollbacks:
  undo:
    - {name: cancel-move, worker_id: exchange, function: cancel_move, params: {mailbox: "{{ email }}"}}
    - {name: tell-user, worker_id: mailer, function: send_email, params: {to: "{{ email }}", subject: sorry}}
on_member_removed:
  - {name: farewell, worker_id: mailer, function: send_email, params: {to: "{{ email }}", subject: removed}}
`

type execFixture struct {
	t     *testing.T
	ctx   context.Context
	x     *runbookExecutor
	store *ledger.Store
	mu    sync.Mutex
	now   time.Time
	batch int64
	start time.Time
}

func (f *execFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *execFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// setupExecutor applies the runbook, loads members a, b, c and creates a
// batch the way the scheduler does (init pending, both phases pending).
func setupExecutor(t *testing.T) *execFixture {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := ledger.New(pool, nil)
	t.Cleanup(store.Close)
	reg, err := registry.Open(ctx, store, "", workflow.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	f := &execFixture{t: t, ctx: ctx, store: store, now: time.Date(2030, 3, 15, 0, 0, 0, 0, time.UTC)}
	eng, err := engine.New(store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: reg, WorkspaceRoot: "file:///ws", Callbacks: engine.Callbacks{GRPCTarget: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	f.x, err = newRunbookExecutor(store, runbook.NewStore(pool), eng, reg, nil, f.clock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := runbook.Parse("exec-test.yaml", []byte(executorRunbook))
	if err != nil {
		t.Fatal(err)
	}
	stored, _, err := f.x.runbooks.Apply(ctx, rb, "test")
	if err != nil {
		t.Fatal(err)
	}
	f.start = f.now
	var members []runbook.Member
	for _, k := range []string{"a", "b", "c", "d"} {
		members = append(members, runbook.Member{Key: k, BatchTime: f.start, Values: map[string]string{"email": k + "@x.org"}})
	}
	if _, err := f.x.runbooks.LoadMembers(ctx, rb.Name, rb.Version, members, true); err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO batches (runbook_id, runbook_name, batch_start_time, status, init_dispatched_at) VALUES ($1, $2, $3, 'init_dispatched', $3)`,
		stored.ID, rb.Name, f.start)
	f.batch = f.id(`SELECT id FROM batches`)
	for _, k := range []string{"a", "b", "c"} {
		f.exec(`INSERT INTO batch_members (batch_id, member_key, status) VALUES ($1, $2, 'active')`, f.batch, k)
	}
	params, _ := rb.Init[0].Params.Render(runbook.BatchVars(f.batch, f.start))
	raw, _ := json.Marshal(params)
	f.exec(`INSERT INTO init_executions (batch_id, step_name, step_index, runbook_version, worker_id, function_name, params_json, status)
		VALUES ($1, 'prepare', 0, 1, 'exchange', 'prepare_batch', $2, 'pending')`, f.batch, raw)
	for _, p := range rb.Phases {
		f.exec(`INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at, runbook_version, status)
			VALUES ($1, $2, $3, $4, 1, 'pending')`, f.batch, p.Name, p.OffsetMinutes, f.start.Add(time.Duration(p.OffsetMinutes)*time.Minute))
	}
	return f
}

func (f *execFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.store.Pool().Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *execFixture) id(sql string, args ...any) int64 {
	f.t.Helper()
	var id int64
	if err := f.store.Pool().QueryRow(f.ctx, sql, args...).Scan(&id); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return id
}

func (f *execFixture) str(sql string, args ...any) string {
	f.t.Helper()
	var s string
	if err := f.store.Pool().QueryRow(f.ctx, sql, args...).Scan(&s); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// event hands the executor a scheduler event.
func (f *execFixture) event(typ string, fields map[string]any) {
	f.t.Helper()
	fields["messageType"], fields["batchId"], fields["runbookName"], fields["runbookVersion"] = typ, f.batch, "exec-test", 1
	body, _ := json.Marshal(fields)
	if err := f.x.handle(f.ctx, typ, body); err != nil {
		f.t.Fatalf("%s: %v", typ, err)
	}
}

// answer plays the engine: the job of an execution reports back.
func (f *execFixture) answer(jobID, status, stepStatus string) {
	f.t.Helper()
	u := engine.JobUpdate{MessageType: engine.MessageTypeJobUpdate, JobID: jobID, Status: status, StepID: "run",
		StepStatus: stepStatus, Output: json.RawMessage(`{"ok":true}`), Reason: "worker said " + stepStatus}
	body, _ := json.Marshal(u)
	if err := f.x.handle(f.ctx, engine.MessageTypeJobUpdate, body); err != nil {
		f.t.Fatalf("job update: %v", err)
	}
}

// statuses lists a phase's step statuses as "member/step/index=status".
func (f *execFixture) statuses(where string, args ...any) map[string]string {
	f.t.Helper()
	rows, err := f.store.Pool().Query(f.ctx, `SELECT m.member_key, s.step_name, s.status FROM step_executions s
		JOIN batch_members m ON m.id = s.batch_member_id WHERE `+where, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, step, status string
		if err := rows.Scan(&k, &step, &status); err != nil {
			f.t.Fatal(err)
		}
		out[k+"/"+step] = status
	}
	return out
}

// dueAndPrecreate marks a phase dispatched with steps for every active member,
// as the scheduler's phase-due does, and hands the executor the event.
func (f *execFixture) phaseDue(name string) int64 {
	f.t.Helper()
	rb, err := f.x.definition(f.ctx, "exec-test", 1)
	if err != nil {
		f.t.Fatal(err)
	}
	phase, _ := rb.Phase(name)
	pid := f.id(`UPDATE phase_executions SET status = 'dispatched', dispatched_at = $2 WHERE batch_id = $1 AND phase_name = $3 RETURNING id`,
		f.batch, f.clock(), name)
	b := &runbook.LockedBatch{ID: f.batch, Name: "exec-test", Start: f.start, Version: 1}
	err = f.store.InTx(f.ctx, func(tx *ledger.Tx) error {
		rows, err := tx.SQL().Query(f.ctx, `SELECT id FROM batch_members WHERE batch_id = $1 AND status = 'active' ORDER BY id`, f.batch)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			rows.Scan(&id) //nolint:errcheck
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			vars, err := f.x.rows(tx).MemberVars(f.ctx, b, id, 1, false)
			if err != nil {
				return err
			}
			if err := f.x.rows(tx).InsertSteps(f.ctx, pid, id, runbook.KindPhase, 0, phase.Steps, vars); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.event(runbook.EventPhaseDue, map[string]any{"phaseExecutionId": pid, "phaseName": name})
	return pid
}

func (f *execFixture) job(member, step string) string {
	return f.str(`SELECT s.job_id FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id
		WHERE m.member_key = $1 AND s.step_name = $2 AND s.status IN ('dispatched', 'polling')`, member, step)
}

func TestRunbookExecutorRunsInitPhasesPollingRollbackCatchUpAndRemoval(t *testing.T) {
	t.Parallel()
	f := setupExecutor(t)

	// Init: the step is dispatched as a job whose payload is its params; the batch becomes active when it succeeds.
	f.event(runbook.EventBatchInit, map[string]any{"memberCount": 3})
	f.event(runbook.EventBatchInit, map[string]any{"memberCount": 3}) // a redelivery changes nothing
	initJob := f.str(`SELECT job_id FROM init_executions WHERE status = 'dispatched'`)
	if initJob != runbook.JobID(runbook.TableInit, f.id(`SELECT id FROM init_executions`)) {
		t.Fatalf("init job id %s", initJob)
	}
	var notify, payload string
	if err := f.store.Pool().QueryRow(f.ctx, `SELECT notify, command->'payload'->>'params' FROM requests WHERE job_id = $1`, initJob).
		Scan(&notify, &payload); err != nil || notify != "orchestrator-events" || payload != fmt.Sprintf(`{"batch": "%d"}`, f.batch) {
		t.Fatalf("init request notify %q payload %q (%v)", notify, payload, err)
	}
	f.answer(initJob, "SUCCEEDED", "SUCCEEDED")
	if s := f.str(`SELECT status FROM batches`); s != "active" {
		t.Fatalf("batch %s after init", s)
	}

	// A phase runs index by index across members: the reminders wait until every notice ended.
	notify1 := f.phaseDue("notify")
	want := map[string]string{"a/send-notice": "dispatched", "b/send-notice": "dispatched", "c/send-notice": "dispatched",
		"a/send-reminder": "pending", "b/send-reminder": "pending", "c/send-reminder": "pending"}
	if got := f.statuses(`s.phase_execution_id = $1`, notify1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after phase-due: %v", got)
	}
	f.answer(f.job("a", "send-notice"), "SUCCEEDED", "SUCCEEDED")
	f.answer(f.job("b", "send-notice"), "FAILED_FINAL", "FAILED_FINAL")
	if got := f.statuses(`s.phase_execution_id = $1 AND s.step_name = 'send-reminder'`, notify1); got["a/send-reminder"] != "pending" ||
		got["b/send-reminder"] != "cancelled" {
		t.Fatalf("before the barrier: %v", got)
	}
	f.answer(f.job("c", "send-notice"), "SUCCEEDED", "SUCCEEDED")
	if got := f.statuses(`s.phase_execution_id = $1 AND s.step_name = 'send-reminder'`, notify1); got["a/send-reminder"] != "dispatched" ||
		got["c/send-reminder"] != "dispatched" {
		t.Fatalf("after the barrier: %v", got)
	}
	f.answer(f.job("a", "send-reminder"), "SUCCEEDED", "SUCCEEDED")
	f.answer(f.job("c", "send-reminder"), "SUCCEEDED", "SUCCEEDED")
	if s := f.str(`SELECT status FROM phase_executions WHERE id = $1`, notify1); s != "failed" {
		t.Fatalf("notify phase %s, want failed (b's notice failed, no rollback)", s)
	}

	// Polling: a poll step answers "still in progress", is polled again, then times out into its rollback.
	migrate := f.phaseDue("migrate")
	f.answer(f.job("a", "move"), "IN_PROGRESS", "POLLING")
	f.answer(f.job("b", "move"), "IN_PROGRESS", "POLLING")
	f.answer(f.job("c", "move"), "IN_PROGRESS", "POLLING")
	if got := f.statuses(`s.phase_execution_id = $1`, migrate); got["a/move"] != "polling" {
		t.Fatalf("after POLLING: %v", got)
	}
	// A member added now catches up on both phases already due, in order.
	dID := f.id(`INSERT INTO batch_members (batch_id, member_key, status, add_dispatched_at) VALUES ($1, 'd', 'active', $2) RETURNING id`, f.batch, f.clock())
	f.event(runbook.EventMemberAdded, map[string]any{"batchMemberId": dID, "memberKey": "d"})
	got := f.statuses(`s.batch_member_id = $1`, dID)
	if got["d/send-notice"] != "dispatched" || got["d/send-reminder"] != "pending" || got["d/move"] != "dispatched" {
		t.Fatalf("catch-up: %v", got)
	}
	if s := f.str(`SELECT status FROM phase_executions WHERE id = $1`, notify1); s != "dispatched" {
		t.Fatalf("a failed phase with catch-up work: %s", s)
	}
	f.answer(f.job("d", "send-notice"), "SUCCEEDED", "SUCCEEDED")
	if got := f.statuses(`s.batch_member_id = $1`, dID); got["d/send-reminder"] != "dispatched" {
		t.Fatalf("catch-up in order: %v", got)
	}

	// Polled again before its timeout; then a and b finish.
	aMove := f.id(`SELECT s.id FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id WHERE m.member_key = 'a' AND s.step_name = 'move'`)
	f.advance(2 * time.Minute)
	f.event(runbook.EventPollCheck, map[string]any{"stepExecutionId": aMove, "stepName": "move", "pollCount": 1})
	if n := f.id(`SELECT poll_count FROM step_executions WHERE id = $1`, aMove); n != 1 {
		t.Fatalf("poll_count %d after a poll-check", n)
	}
	f.answer(f.job("a", "move"), "SUCCEEDED", "SUCCEEDED")
	f.answer(f.job("b", "move"), "SUCCEEDED", "SUCCEEDED")

	// d leaves: what it still had is cancelled and its farewell runs.
	f.exec(`UPDATE batch_members SET status = 'removed', removed_at = now() WHERE id = $1`, dID)
	f.event(runbook.EventMemberRemoved, map[string]any{"batchMemberId": dID, "memberKey": "d"})
	got = f.statuses(`s.batch_member_id = $1`, dID)
	if got["d/send-reminder"] != "cancelled" || got["d/move"] != "cancelled" || got["d/farewell"] != "dispatched" {
		t.Fatalf("removal: %v", got)
	}
	f.answer(f.job("d", "farewell"), "SUCCEEDED", "SUCCEEDED")
	if s := f.str(`SELECT status FROM phase_executions WHERE id = $1`, notify1); s != "failed" {
		t.Fatalf("notify phase %s after the removal (b's notice failed)", s)
	}

	// c polls past its timeout: poll_timeout, and its rollback runs in order.
	cMove := f.id(`SELECT s.id FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id WHERE m.member_key = 'c' AND s.step_name = 'move'`)
	f.advance(20 * time.Minute) // past poll_timeout_sec
	f.event(runbook.EventPollCheck, map[string]any{"stepExecutionId": cMove, "stepName": "move", "pollCount": 2})
	if got := f.statuses(`s.batch_member_id = (SELECT id FROM batch_members WHERE member_key = 'c') AND s.phase_execution_id = $1`, migrate); got["c/move"] != "poll_timeout" ||
		got["c/cancel-move"] != "dispatched" || got["c/tell-user"] != "pending" {
		t.Fatalf("after the poll timeout: %v", got)
	}
	if s := f.str(`SELECT status FROM phase_executions WHERE id = $1`, migrate); s != "dispatched" {
		t.Fatalf("migrate phase %s while its rollback runs", s)
	}
	f.answer(f.job("c", "cancel-move"), "SUCCEEDED", "SUCCEEDED")
	f.answer(f.job("c", "tell-user"), "SUCCEEDED", "SUCCEEDED")
	if s := f.str(`SELECT status FROM step_executions WHERE id = $1`, cMove); s != "rolled_back" {
		t.Fatalf("the timed-out step is %s after its rollback, want rolled_back", s)
	}
	if s := f.str(`SELECT status FROM phase_executions WHERE id = $1`, migrate); s != "failed" {
		t.Fatalf("migrate phase %s", s)
	}
	if s := f.str(`SELECT status FROM batches`); s != "failed" {
		t.Fatalf("batch %s, want failed (its phases failed)", s)
	}
	// Every dispatch is a job request for the executor's topic.
	if n := f.id(`SELECT count(*) FROM requests WHERE notify = 'orchestrator-events'`); n != f.id(`SELECT count(*) FROM step_executions WHERE job_id IS NOT NULL`)+1 {
		t.Fatalf("%d requests for runbook jobs", n)
	}
}
