package runbook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The read side of the execution tables, for the API: what a batch is doing.
// The scheduler and the orchestrator write these tables; nothing here does.

// BatchView is a batch as reported: its row, the version governing it and
// its member counts. Phases and Init are filled by Store.Batch only.
type BatchView struct {
	ID          int64
	RunbookID   int64
	RunbookName string
	// RunbookVersion is the version governing the batch now.
	RunbookVersion int
	StartTime      time.Time
	// Status is one of the Batch* statuses.
	Status string
	// DetectedAt is when the scheduler found the batch; InitDispatchedAt and
	// CompletedAt are zero until then.
	DetectedAt       time.Time
	InitDispatchedAt time.Time
	CompletedAt      time.Time
	// ActiveMembers and RemovedMembers count batch_members by status.
	ActiveMembers  int
	RemovedMembers int
	// Phases are the batch's phase executions (of every version) by due time.
	Phases []PhaseExecutionView
	// Init are the batch's init executions by version, then step index.
	Init []InitExecutionView
}

// PhaseExecutionView is a phase execution with its steps counted.
type PhaseExecutionView struct {
	ID             int64
	PhaseName      string
	OffsetMinutes  int
	DueAt          time.Time
	RunbookVersion int
	// Status is one of the Phase* statuses.
	Status       string
	DispatchedAt time.Time
	CompletedAt  time.Time
	// Steps counts the phase's own step executions (kind phase: not its
	// rollbacks) by status (the Step* statuses); statuses without steps are absent.
	Steps map[string]int
}

// InitExecutionView is an init execution, without its params and result.
type InitExecutionView struct {
	ID             int64
	StepName       string
	StepIndex      int
	RunbookVersion int
	WorkerID       string
	Function       string
	// Status is one of the Step* statuses.
	Status       string
	JobID        string
	Error        string
	PollCount    int
	DispatchedAt time.Time
	CompletedAt  time.Time
}

// MemberView is a batch member with its step executions.
type MemberView struct {
	Key string
	// Status is active or removed.
	Status    string
	AddedAt   time.Time
	RemovedAt time.Time
	// Steps are its phase, rollback and removal steps by phase due time,
	// then step index.
	Steps []MemberStepView
}

// MemberStepView is one step execution of a member, without its params and result.
type MemberStepView struct {
	PhaseName    string    `json:"phase_name"`
	Kind         string    `json:"kind"`
	StepName     string    `json:"step_name"`
	StepIndex    int       `json:"step_index"`
	WorkerID     string    `json:"worker_id"`
	Function     string    `json:"function"`
	Status       string    `json:"status"`
	JobID        string    `json:"job_id"`
	Error        string    `json:"error"`
	PollCount    int       `json:"poll_count"`
	DispatchedAt time.Time `json:"dispatched_at"`
	CompletedAt  time.Time `json:"completed_at"`
}

const (
	// selectBatch reads batches with their governing version and member counts.
	selectBatch = `SELECT b.id, b.runbook_id, b.runbook_name, r.version, b.batch_start_time, b.status, b.detected_at,
	b.init_dispatched_at, b.completed_at, m.active, m.removed
	FROM batches b
	JOIN runbooks r ON r.id = b.runbook_id
	CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE status = 'active') AS active,
		count(*) FILTER (WHERE status = 'removed') AS removed
		FROM batch_members WHERE batch_id = b.id) m `

	sqlRunbookExists = `SELECT EXISTS (SELECT 1 FROM runbooks WHERE name = $1)`

	sqlBatches = selectBatch + `WHERE b.runbook_name = $1 AND ($2::bigint = 0 OR b.id < $2) ORDER BY b.id DESC LIMIT $3`

	sqlBatch = selectBatch + `WHERE b.id = $1`

	sqlPhaseExecutions = `SELECT p.id, p.phase_name, p.offset_minutes, p.due_at, p.runbook_version, p.status,
	p.dispatched_at, p.completed_at,
	coalesce((SELECT jsonb_object_agg(c.status, c.n) FROM (SELECT s.status, count(*) AS n FROM step_executions s
		WHERE s.phase_execution_id = p.id AND s.kind = 'phase' GROUP BY s.status) c), '{}'::jsonb)
	FROM phase_executions p WHERE p.batch_id = $1 ORDER BY p.due_at, p.runbook_version, p.id`

	sqlBatchExists = `SELECT EXISTS (SELECT 1 FROM batches WHERE id = $1)`

	// sqlBatchMembers pages a batch's members by key, each with its step
	// executions as one JSON array (timestamps in UTC, "" for none).
	sqlBatchMembers = `SELECT m.member_key, m.status, m.added_at, m.removed_at,
	coalesce((SELECT jsonb_agg(jsonb_build_object('phase_name', coalesce(p.phase_name, ''), 'kind', s.kind,
		'step_name', s.step_name, 'step_index', s.step_index, 'worker_id', s.worker_id, 'function', s.function_name,
		'status', s.status, 'job_id', coalesce(s.job_id, ''), 'error', coalesce(s.error_message, ''),
		'poll_count', s.poll_count,
		'dispatched_at', coalesce(to_char(s.dispatched_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '0001-01-01T00:00:00Z'),
		'completed_at', coalesce(to_char(s.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '0001-01-01T00:00:00Z'))
		ORDER BY p.due_at NULLS LAST, s.step_index, s.id)
		FROM step_executions s LEFT JOIN phase_executions p ON p.id = s.phase_execution_id
		WHERE s.batch_member_id = m.id), '[]'::jsonb)
	FROM batch_members m WHERE m.batch_id = $1 AND m.member_key > $2 ORDER BY m.member_key LIMIT $3`

	sqlInitExecutions = `SELECT id, step_name, step_index, runbook_version, worker_id, function_name, status,
	coalesce(job_id, ''), coalesce(error_message, ''), poll_count, dispatched_at, completed_at
	FROM init_executions WHERE batch_id = $1 ORDER BY runbook_version, step_index`
)

// Batches lists a runbook's batches newest first (by id), at most limit,
// starting after the batch with id afterID (0: from the newest): pass the
// last id of a page to get the next. ErrNotFound when no version of the
// runbook is stored.
func (s *Store) Batches(ctx context.Context, name string, afterID int64, limit int) ([]BatchView, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, sqlRunbookExists, name).Scan(&exists); err != nil {
		return nil, fmt.Errorf("batches of %s: %w", name, err)
	}
	if !exists {
		return nil, fmt.Errorf("batches of %s: runbook %w", name, ErrNotFound)
	}
	rows, err := s.pool.Query(ctx, sqlBatches, name, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("batches of %s: %w", name, err)
	}
	out, err := pgx.CollectRows(rows, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("batches of %s: %w", name, err)
	}
	return out, nil
}

// Batch returns a batch with its phase executions and init executions;
// ErrNotFound when there is none. It reads in one snapshot, so the counts
// and the executions agree.
func (s *Store) Batch(ctx context.Context, id int64) (*BatchView, error) {
	var b BatchView
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlBatch, id)
		if err != nil {
			return err
		}
		if b, err = pgx.CollectExactlyOneRow(rows, scanBatch); err != nil {
			return err
		}
		if rows, err = tx.Query(ctx, sqlPhaseExecutions, id); err != nil {
			return err
		}
		if b.Phases, err = pgx.CollectRows(rows, scanPhaseExecution); err != nil {
			return fmt.Errorf("phase executions: %w", err)
		}
		if rows, err = tx.Query(ctx, sqlInitExecutions, id); err != nil {
			return err
		}
		if b.Init, err = pgx.CollectRows(rows, scanInitExecution); err != nil {
			return fmt.Errorf("init executions: %w", err)
		}
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", id, err)
	}
	return &b, nil
}

// BatchMembers lists a batch's members by key, at most limit, after the
// member afterKey ("": from the first), with their step executions.
// ErrNotFound when there is no such batch.
func (s *Store) BatchMembers(ctx context.Context, batchID int64, afterKey string, limit int) ([]MemberView, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, sqlBatchExists, batchID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("members of batch %d: %w", batchID, err)
	}
	if !exists {
		return nil, fmt.Errorf("members of batch %d: %w", batchID, ErrNotFound)
	}
	rows, err := s.pool.Query(ctx, sqlBatchMembers, batchID, afterKey, limit)
	if err != nil {
		return nil, fmt.Errorf("members of batch %d: %w", batchID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MemberView, error) {
		var (
			m       MemberView
			removed *time.Time
		)
		if err := row.Scan(&m.Key, &m.Status, &m.AddedAt, &removed, &m.Steps); err != nil {
			return m, err
		}
		m.AddedAt, m.RemovedAt = m.AddedAt.UTC(), utcOrZero(removed)
		return m, nil
	})
	if err != nil {
		return nil, fmt.Errorf("members of batch %d: %w", batchID, err)
	}
	return out, nil
}

func scanBatch(row pgx.CollectableRow) (BatchView, error) {
	var (
		b                     BatchView
		initAt, completedAt   *time.Time
		active, removed       int64
		startTime, detectedAt time.Time
	)
	if err := row.Scan(&b.ID, &b.RunbookID, &b.RunbookName, &b.RunbookVersion, &startTime, &b.Status, &detectedAt,
		&initAt, &completedAt, &active, &removed); err != nil {
		return BatchView{}, err
	}
	b.StartTime, b.DetectedAt = startTime.UTC(), detectedAt.UTC()
	b.InitDispatchedAt, b.CompletedAt = utcOrZero(initAt), utcOrZero(completedAt)
	b.ActiveMembers, b.RemovedMembers = int(active), int(removed)
	return b, nil
}

func scanPhaseExecution(row pgx.CollectableRow) (PhaseExecutionView, error) {
	var (
		p                       PhaseExecutionView
		dispatchedAt, completed *time.Time
	)
	if err := row.Scan(&p.ID, &p.PhaseName, &p.OffsetMinutes, &p.DueAt, &p.RunbookVersion, &p.Status,
		&dispatchedAt, &completed, &p.Steps); err != nil {
		return PhaseExecutionView{}, err
	}
	p.DueAt = p.DueAt.UTC()
	p.DispatchedAt, p.CompletedAt = utcOrZero(dispatchedAt), utcOrZero(completed)
	return p, nil
}

func scanInitExecution(row pgx.CollectableRow) (InitExecutionView, error) {
	var (
		e                       InitExecutionView
		dispatchedAt, completed *time.Time
	)
	if err := row.Scan(&e.ID, &e.StepName, &e.StepIndex, &e.RunbookVersion, &e.WorkerID, &e.Function, &e.Status,
		&e.JobID, &e.Error, &e.PollCount, &dispatchedAt, &completed); err != nil {
		return InitExecutionView{}, err
	}
	e.DispatchedAt, e.CompletedAt = utcOrZero(dispatchedAt), utcOrZero(completed)
	return e, nil
}

// utcOrZero reads a nullable timestamp: zero when NULL.
func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
