package runbook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/core/ledger"
)

// Executions reads and writes a batch's execution rows (batches, phase, step
// and init executions) inside a ledger transaction: the orchestrator's
// runbook executor changes them together with the jobs that run them, so
// both commit or neither does. Every method runs under the batch's lock
// (LockBatch first).
type Executions struct {
	q     Querier
	store *Store
}

// InLedgerTx returns the execution rows as seen by tx.
func (s *Store) InLedgerTx(tx *ledger.Tx) *Executions { return &Executions{q: tx.SQL(), store: s} }

// LockedBatch is a batch locked for the transaction: every executor change to
// a batch's rows happens under this lock, so competing orchestrators
// serialize per batch.
type LockedBatch struct {
	ID        int64
	RunbookID int64
	Name      string
	Start     time.Time
	Status    string
	Version   int // the governing version
	DataTable string
}

// LockBatch locks a batch (ErrNotFound when there is none).
func (e *Executions) LockBatch(ctx context.Context, id int64) (*LockedBatch, error) {
	var b LockedBatch
	err := e.q.QueryRow(ctx, sqlLockBatch, id).Scan(&b.ID, &b.RunbookID, &b.Name, &b.Start, &b.Status, &b.Version, &b.DataTable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, ErrNotFound)
	}
	return &b, err
}

// SetBatchStatus moves a batch to status (completed and failed end it).
func (e *Executions) SetBatchStatus(ctx context.Context, b *LockedBatch, status string, now time.Time) error {
	if b.Status == status {
		return nil
	}
	b.Status = status
	_, err := e.q.Exec(ctx, sqlSetBatchStatus, b.ID, status, now)
	return err
}

// MemberActive reports whether a batch member is active.
func (e *Executions) MemberActive(ctx context.Context, id int64) bool {
	var status string
	err := e.q.QueryRow(ctx, sqlMemberStatus, id).Scan(&status)
	return err == nil && status == MemberActive
}

// MemberVars are a member's template variables from the given version's
// member table (lastKnown: whether or not the source still returns it).
func (e *Executions) MemberVars(ctx context.Context, b *LockedBatch, memberID int64, version int, lastKnown bool) (map[string]string, error) {
	var key string
	if err := e.q.QueryRow(ctx, sqlMemberKey, memberID).Scan(&key); err != nil {
		return nil, err
	}
	table := DataTableName(b.Name, version)
	read := e.store.Member
	if lastKnown {
		read = e.store.LastKnownMember
	}
	m, err := read(ctx, e.q, table, key)
	if err != nil {
		return nil, err
	}
	return MemberVars(m, b.ID, b.Start), nil
}

// PhaseExecution is a phase of a batch, due or done.
type PhaseExecution struct {
	ID      int64
	Name    string
	Version int
	Status  string
}

// LockPhase locks a phase execution.
func (e *Executions) LockPhase(ctx context.Context, id int64) (*PhaseExecution, error) {
	var p PhaseExecution
	err := e.q.QueryRow(ctx, sqlLockPhase, id).Scan(&p.ID, &p.Name, &p.Version, &p.Status)
	return &p, err
}

// EndPhase records a phase's end (completed or failed).
func (e *Executions) EndPhase(ctx context.Context, id int64, status string, now time.Time) error {
	_, err := e.q.Exec(ctx, sqlEndPhase, id, status, now)
	return err
}

// ReopenPhase makes an ended phase dispatched again: a member added late has
// its steps to catch up on.
func (e *Executions) ReopenPhase(ctx context.Context, id int64) error {
	_, err := e.q.Exec(ctx, sqlReopenPhase, id)
	return err
}

// PhasesLeft counts the phases of a batch's governing version still open
// (pending or dispatched) and those that failed.
func (e *Executions) PhasesLeft(ctx context.Context, b *LockedBatch) (open, failed int, err error) {
	err = e.q.QueryRow(ctx, sqlPhasesLeft, b.ID, b.Version).Scan(&open, &failed)
	return open, failed, err
}

// PhasesDue lists the phases of a batch's governing version that are due
// (dispatched) or done, in due order: what a member added late catches up on.
func (e *Executions) PhasesDue(ctx context.Context, b *LockedBatch) ([]PhaseExecution, error) {
	rows, err := e.q.Query(ctx, sqlPhasesDue, b.ID, b.Version)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (PhaseExecution, error) {
		var p PhaseExecution
		return p, row.Scan(&p.ID, &p.Name, &p.Version, &p.Status)
	})
}

// Execution is a step or init execution: one unit of runbook work, run as
// one Lucius job.
type Execution struct {
	Table       string // TableSteps or TableInit
	ID          int64
	BatchID     int64
	PhaseID     int64 // 0: init and removal steps
	MemberID    int64 // 0: init steps
	Kind        string
	ParentID    int64
	StepName    string
	StepIndex   int
	Version     int // init rows only; steps take their phase's or batch's
	WorkerID    string
	Function    string
	Params      json.RawMessage
	Status      string
	JobID       string
	IsPoll      bool
	PollTimeout int
	PollStarted time.Time
	PollCount   int
	OnFailure   string
}

// Terminal reports whether the execution's work is over.
func (r *Execution) Terminal() bool {
	switch r.Status {
	case StepPending, StepDispatched, StepPolling:
		return false
	}
	return true
}

// InitSteps lists a batch's init executions of its latest init version, in order.
func (e *Executions) InitSteps(ctx context.Context, batchID int64) ([]*Execution, error) {
	return e.list(ctx, TableInit, sqlInitSelect+sqlInitOfBatch, batchID)
}

// PhaseSteps lists a phase's step executions by step index.
func (e *Executions) PhaseSteps(ctx context.Context, phaseID int64) ([]*Execution, error) {
	return e.list(ctx, TableSteps, sqlStepSelect+sqlStepsOfPhase, phaseID)
}

// RollbackSteps lists the rollback steps a failed step started, in order.
func (e *Executions) RollbackSteps(ctx context.Context, parentID int64) ([]*Execution, error) {
	return e.list(ctx, TableSteps, sqlStepSelect+sqlStepsOfParent, parentID)
}

// RemovalSteps lists a removed member's on_member_removed steps, in order.
func (e *Executions) RemovalSteps(ctx context.Context, memberID int64) ([]*Execution, error) {
	return e.list(ctx, TableSteps, sqlStepSelect+sqlRemovalStepsOfMember, memberID)
}

// MemberWork lists a member's phase and rollback steps (not its removal steps).
func (e *Executions) MemberWork(ctx context.Context, memberID int64) ([]*Execution, error) {
	return e.list(ctx, TableSteps, sqlStepSelect+sqlWorkOfMember, memberID)
}

// ByJob finds the execution a job runs (ErrNotFound: none).
func (e *Executions) ByJob(ctx context.Context, jobID string) (*Execution, error) {
	for _, q := range []struct{ table, sql string }{
		{TableSteps, sqlStepSelect + ` WHERE s.job_id = $1`},
		{TableInit, sqlInitSelect + ` WHERE i.job_id = $1`},
	} {
		rows, err := e.list(ctx, q.table, q.sql, jobID)
		if err != nil {
			return nil, err
		}
		if len(rows) == 1 {
			return rows[0], nil
		}
	}
	return nil, ErrNotFound
}

// ByID reads one execution (ErrNotFound: none).
func (e *Executions) ByID(ctx context.Context, table string, id int64) (*Execution, error) {
	query := sqlStepSelect + ` WHERE s.id = $1`
	if table == TableInit {
		query = sqlInitSelect + ` WHERE i.id = $1`
	}
	rows, err := e.list(ctx, table, query, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s execution %d: %w", table, id, ErrNotFound)
	}
	return rows[0], nil
}

func (e *Executions) list(ctx context.Context, table, query string, args ...any) ([]*Execution, error) {
	rows, err := e.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Execution, error) {
		r := &Execution{Table: table}
		var started *time.Time
		err := row.Scan(&r.ID, &r.BatchID, &r.PhaseID, &r.MemberID, &r.Kind, &r.ParentID, &r.StepName, &r.StepIndex,
			&r.Version, &r.WorkerID, &r.Function, &r.Params, &r.Status, &r.JobID, &r.IsPoll, &r.PollTimeout, &started,
			&r.PollCount, &r.OnFailure)
		if started != nil {
			r.PollStarted = *started
		}
		return r, err
	})
}

// Finish ends an execution's work with status (and, for failures, a message).
func (e *Executions) Finish(ctx context.Context, r *Execution, status string, result json.RawMessage, errMsg string, now time.Time) error {
	r.Status = status
	_, err := e.q.Exec(ctx, sqlFinishExecution(r.Table), r.ID, status, jsonOrNil(result), errMsg, now)
	return err
}

// Polling records a "still in progress" answer.
func (e *Executions) Polling(ctx context.Context, r *Execution, result json.RawMessage, now time.Time) error {
	r.Status = StepPolling
	_, err := e.q.Exec(ctx, sqlPollingExecution(r.Table), r.ID, jsonOrNil(result), now)
	return err
}

// Polled records that a polling execution was asked again (its poll count
// at least pollCount).
func (e *Executions) Polled(ctx context.Context, r *Execution, pollCount int, now time.Time) error {
	_, err := e.q.Exec(ctx, sqlPolledExecution(r.Table), r.ID, now, pollCount)
	return err
}

// Dispatched records the job that runs an execution.
func (e *Executions) Dispatched(ctx context.Context, r *Execution, jobID string, now time.Time) error {
	r.Status, r.JobID = StepDispatched, jobID
	_, err := e.q.Exec(ctx, sqlDispatchedExecution(r.Table), r.ID, now, jobID)
	return err
}

// Cancel cancels the executions that have not ended and returns the jobs
// that were running for them (to cancel after commit).
func (e *Executions) Cancel(ctx context.Context, rows []*Execution, why string, now time.Time) ([]string, error) {
	var jobs []string
	for _, r := range rows {
		if r.Terminal() {
			continue
		}
		if r.JobID != "" {
			jobs = append(jobs, r.JobID)
		}
		if err := e.Finish(ctx, r, StepCancelled, nil, why, now); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// HasRollback reports whether a failed step's rollback was created.
func (e *Executions) HasRollback(ctx context.Context, failedID int64) (bool, error) {
	var exists bool
	err := e.q.QueryRow(ctx, sqlHasRollback, failedID).Scan(&exists)
	return exists, err
}

// NoteRollbackEnd appends to a failed step's message how a rollback step ended.
func (e *Executions) NoteRollbackEnd(ctx context.Context, failedID int64, note string) error {
	_, err := e.q.Exec(ctx, sqlAppendError, failedID, note)
	return err
}

// RolledBack marks a failed step rolled back.
func (e *Executions) RolledBack(ctx context.Context, failedID int64) error {
	_, err := e.q.Exec(ctx, sqlRolledBack, failedID)
	return err
}

// HasPhaseStep reports whether a member has a (not cancelled) step in a phase.
func (e *Executions) HasPhaseStep(ctx context.Context, phaseID, memberID int64) (bool, error) {
	var live bool
	err := e.q.QueryRow(ctx, sqlHasPhaseStep, phaseID, memberID).Scan(&live)
	return live, err
}

// RemovalStarted reports whether a member's removal steps were created.
func (e *Executions) RemovalStarted(ctx context.Context, memberID int64) (bool, error) {
	var n int
	err := e.q.QueryRow(ctx, sqlRemovalCount, memberID).Scan(&n)
	return n > 0, err
}

// InsertSteps creates pending step executions of a member from step
// definitions; a step whose params cannot render is created failed, with why.
func (e *Executions) InsertSteps(ctx context.Context, phaseID, memberID int64, kind string, parentID int64, steps []Step, vars map[string]string) error {
	for i, s := range steps {
		status, errMsg := StepPending, ""
		params, err := s.Params.Render(vars)
		if err != nil {
			status, errMsg, params = StepFailed, "params: "+err.Error(), map[string]any{}
		}
		raw, err := json.Marshal(params)
		if err != nil {
			return err
		}
		interval, timeout := pollSettings(s)
		_, err = e.q.Exec(ctx, sqlInsertStep, phaseID, memberID, kind, parentID, s.Name, i, s.WorkerID, s.Function, raw, status, errMsg,
			s.IsPollStep, interval, timeout, s.OnFailure)
		if err != nil {
			return fmt.Errorf("insert %s step %s: %w", kind, s.Name, err)
		}
	}
	return nil
}

func jsonOrNil(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// executionTable is the table holding executions of kind table.
func executionTable(table string) string {
	if table == TableInit {
		return "init_executions"
	}
	return "step_executions"
}

const (
	sqlLockBatch = `SELECT b.id, b.runbook_id, b.runbook_name, b.batch_start_time, b.status, r.version, r.data_table_name
	FROM batches b JOIN runbooks r ON r.id = b.runbook_id WHERE b.id = $1 FOR UPDATE OF b`
	sqlSetBatchStatus = `UPDATE batches SET status = $2,
	completed_at = CASE WHEN $2 IN ('completed', 'failed') THEN $3::timestamptz ELSE completed_at END WHERE id = $1`
	sqlMemberStatus = `SELECT status FROM batch_members WHERE id = $1`
	sqlMemberKey    = `SELECT member_key FROM batch_members WHERE id = $1`

	sqlLockPhase   = `SELECT id, phase_name, runbook_version, status FROM phase_executions WHERE id = $1 FOR UPDATE`
	sqlEndPhase    = `UPDATE phase_executions SET status = $2, completed_at = $3 WHERE id = $1`
	sqlReopenPhase = `UPDATE phase_executions SET status = 'dispatched', completed_at = NULL WHERE id = $1`
	sqlPhasesLeft  = `SELECT count(*) FILTER (WHERE status IN ('pending', 'dispatched')),
	count(*) FILTER (WHERE status = 'failed') FROM phase_executions WHERE batch_id = $1 AND runbook_version = $2`
	sqlPhasesDue = `SELECT id, phase_name, runbook_version, status FROM phase_executions
	WHERE batch_id = $1 AND runbook_version = $2 AND status IN ('dispatched', 'completed', 'failed') ORDER BY due_at, id`

	sqlStepSelect = `SELECT s.id, m.batch_id, coalesce(s.phase_execution_id, 0), s.batch_member_id, s.kind, coalesce(s.parent_id, 0),
	s.step_name, s.step_index, 0, s.worker_id, s.function_name, s.params_json, s.status, coalesce(s.job_id, ''),
	s.is_poll_step, coalesce(s.poll_timeout_sec, 0), s.poll_started_at, s.poll_count, s.on_failure
	FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id`
	sqlInitSelect = `SELECT i.id, i.batch_id, 0, 0, 'init', 0, i.step_name, i.step_index, i.runbook_version, i.worker_id,
	i.function_name, i.params_json, i.status, coalesce(i.job_id, ''), i.is_poll_step, coalesce(i.poll_timeout_sec, 0),
	i.poll_started_at, i.poll_count, '' FROM init_executions i`
	sqlInitOfBatch = ` WHERE i.batch_id = $1 AND i.runbook_version =
	(SELECT max(runbook_version) FROM init_executions WHERE batch_id = $1) ORDER BY i.step_index`
	sqlStepsOfPhase         = ` WHERE s.phase_execution_id = $1 ORDER BY s.step_index, s.id`
	sqlStepsOfParent        = ` WHERE s.parent_id = $1 ORDER BY s.step_index`
	sqlRemovalStepsOfMember = ` WHERE s.batch_member_id = $1 AND s.kind = 'removal' ORDER BY s.id`
	sqlWorkOfMember         = ` WHERE s.batch_member_id = $1 AND s.kind <> 'removal' ORDER BY s.id`

	sqlHasRollback  = `SELECT EXISTS (SELECT 1 FROM step_executions WHERE parent_id = $1)`
	sqlAppendError  = `UPDATE step_executions SET error_message = coalesce(error_message, '') || $2 WHERE id = $1`
	sqlRolledBack   = `UPDATE step_executions SET status = 'rolled_back' WHERE id = $1 AND status IN ('failed', 'poll_timeout')`
	sqlHasPhaseStep = `SELECT EXISTS (SELECT 1 FROM step_executions WHERE phase_execution_id = $1
	AND batch_member_id = $2 AND kind = 'phase' AND status <> 'cancelled')`
	sqlRemovalCount = `SELECT count(*) FROM step_executions WHERE batch_member_id = $1 AND kind = 'removal'`
	sqlInsertStep   = `INSERT INTO step_executions (phase_execution_id, batch_member_id, kind, parent_id, step_name,
	step_index, worker_id, function_name, params_json, status, error_message, is_poll_step, poll_interval_sec,
	poll_timeout_sec, on_failure) VALUES (nullif($1, 0), $2, $3, nullif($4, 0), $5, $6, $7, $8, $9, $10, nullif($11, ''),
	$12, $13, $14, $15)`
)

func sqlFinishExecution(table string) string {
	return `UPDATE ` + executionTable(table) + ` SET status = $2, result_json = coalesce($3, result_json),
	error_message = nullif($4, ''), completed_at = $5 WHERE id = $1`
}

func sqlPollingExecution(table string) string {
	return `UPDATE ` + executionTable(table) + ` SET status = 'polling', result_json = coalesce($2, result_json),
	poll_started_at = coalesce(poll_started_at, $3), last_polled_at = $3 WHERE id = $1`
}

func sqlPolledExecution(table string) string {
	return `UPDATE ` + executionTable(table) + ` SET last_polled_at = $2, poll_count = greatest(poll_count + 1, $3) WHERE id = $1`
}

func sqlDispatchedExecution(table string) string {
	return `UPDATE ` + executionTable(table) + ` SET status = 'dispatched', dispatched_at = $2, job_id = $3 WHERE id = $1`
}
