package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// StepWithAttempts is a step and its attempts, oldest first.
type StepWithAttempts struct {
	Step
	Attempts []Attempt
}

// StepFilter selects and pages a job's steps.
type StepFilter struct {
	// Kinds keeps only these kinds (empty: all).
	Kinds []string
	Limit int
	// After continues after this step (its definition index, child index and id).
	AfterIndex, AfterChild int
	AfterStepID            string
}

// ListSteps returns a job's steps in definition order (each fan-out's children
// after it) with their attempts. A job not yet created by an orchestrator has none.
func (s *Store) ListSteps(ctx context.Context, jobID string, f StepFilter) ([]StepWithAttempts, error) {
	if f.Limit == 0 {
		f.Limit = 1 << 30
	}
	if f.Kinds == nil {
		f.Kinds = []string{}
	}
	afterIndex := f.AfterIndex
	if f.AfterStepID == "" {
		afterIndex = -1
	}
	rows, err := s.pool.Query(ctx, sqlListSteps, jobID, f.Kinds, afterIndex, f.AfterChild, f.AfterStepID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", jobID, err)
	}
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) { return scanStep(row) })
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", jobID, err)
	}
	if len(steps) == 0 {
		return nil, nil
	}
	ids := make([]string, len(steps))
	for i, st := range steps {
		ids[i] = st.StepID
	}
	rows, err = s.pool.Query(ctx, sqlAttemptsOfSteps, jobID, ids)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		a, err := scanAttempt(row)
		if err != nil {
			return Attempt{}, err
		}
		return *a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	byStep := map[string][]Attempt{}
	for _, a := range attempts {
		byStep[a.StepID] = append(byStep[a.StepID], a)
	}
	out := make([]StepWithAttempts, len(steps))
	for i, st := range steps {
		out[i] = StepWithAttempts{Step: st, Attempts: byStep[st.StepID]}
	}
	return out, nil
}

// CancelWaiting closes the job's steps that wait without running (for a
// retry, or POLLING for the next poll) and returns them, each with the
// status it had.
func (t *Tx) CancelWaiting(ctx context.Context, jobID, reason string) ([]Step, error) {
	rows, err := t.tx.Query(ctx, sqlCancelWaiting, jobID, reason)
	if err != nil {
		return nil, fmt.Errorf("cancel waiting steps of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) {
		s := Step{JobID: jobID}
		return s, row.Scan(&s.StepID, &s.Parent, &s.AttemptNo, &s.Status)
	})
}

// AllSteps returns every step of a job: nodes and fan-out children.
func (t *Tx) AllSteps(ctx context.Context, jobID string) ([]Step, error) {
	return t.steps(ctx, sqlAllSteps, jobID)
}

// NodeSteps returns the job's workflow-node steps (not fan-out children) in
// definition order. Call LockJob first: the job lock guards its steps.
func (t *Tx) NodeSteps(ctx context.Context, jobID string) ([]Step, error) {
	return t.steps(ctx, sqlNodeSteps, jobID)
}

// Step returns one step (a node or a fan-out child).
func (t *Tx) Step(ctx context.Context, jobID, stepID string) (*Step, error) {
	return t.step(ctx, sqlStep, jobID, stepID)
}

// LockStep returns one step and locks its row (after LockJob). The job lock
// orders the engine's writers; the step lock also waits for the dispatcher,
// which moves published steps to AWAITING_ACK without the job lock, so a
// callback reads the status it replaces.
func (t *Tx) LockStep(ctx context.Context, jobID, stepID string) (*Step, error) {
	return t.step(ctx, sqlStep+` FOR UPDATE`, jobID, stepID)
}

func (t *Tx) step(ctx context.Context, query, jobID, stepID string) (*Step, error) {
	st, err := scanStep(t.tx.QueryRow(ctx, query, jobID, stepID))
	if isNoRows(err) {
		return nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, err)
	}
	return &st, nil
}

// PendingChildren returns up to limit children of a fan-out step that have
// not started, in index order.
func (t *Tx) PendingChildren(ctx context.Context, jobID, parent string, limit int) ([]Step, error) {
	return t.steps(ctx, sqlPendingChildren, jobID, parent, limit)
}

// ChildResult is what one fan-out child produced.
type ChildResult struct {
	Output    json.RawMessage
	Artifacts []Artifact
}

// ChildResults returns every child's output and artifacts, in index order.
func (t *Tx) ChildResults(ctx context.Context, jobID, parent string) ([]ChildResult, error) {
	rows, err := t.tx.Query(ctx, sqlChildResults, jobID, parent)
	if err != nil {
		return nil, fmt.Errorf("children of %s/%s: %w", jobID, parent, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChildResult, error) {
		var r ChildResult
		var artifacts []byte
		if err := row.Scan(&r.Output, &artifacts); err != nil {
			return r, err
		}
		return r, json.Unmarshal(artifacts, &r.Artifacts)
	})
}

// CancelledStep is a step CancelPending closed.
type CancelledStep struct {
	StepID string
	// Parent is the fan-out step a child belongs to ("" for a workflow node).
	Parent string
}

// CancelPending closes every step of the job that never started (nodes and
// fan-out children) and returns them.
func (t *Tx) CancelPending(ctx context.Context, jobID, reason string) ([]CancelledStep, error) {
	rows, err := t.tx.Query(ctx, sqlCancelPending, jobID, reason)
	if err != nil {
		return nil, fmt.Errorf("cancel pending steps of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CancelledStep, error) {
		var c CancelledStep
		return c, row.Scan(&c.StepID, &c.Parent)
	})
}

func (t *Tx) steps(ctx context.Context, query string, args ...any) ([]Step, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("steps: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) { return scanStep(row) })
}

// InsertSteps creates steps.
func (t *Tx) InsertSteps(ctx context.Context, steps []Step) error {
	rows := make([][]any, len(steps))
	for i, s := range steps {
		artifacts, err := json.Marshal(nonNilArtifacts(s.Artifacts))
		if err != nil {
			return err
		}
		c := s.Children
		rows[i] = []any{s.JobID, s.StepID, s.NodeID, s.Kind, s.Parent, s.ChildNo, s.Index, s.Type, s.Service,
			string(s.Status), s.AttemptNo, nullUUID(s.LeaseID), s.MaxAttempts, s.AckTimeout.Milliseconds(),
			jsonOrNull(s.Params), jsonOrNull(s.Output), artifacts, s.Expanded, c.Total, c.Pending, c.Running,
			c.Succeeded, c.Failed, nullTime(s.CompletedAt), s.RetryBase}
	}
	_, err := t.tx.CopyFrom(ctx, pgx.Identifier{"steps"}, []string{"job_id", "step_id", "node_id", "kind",
		"parent_step_id", "child_index", "step_index", "step_type", "service", "status", "attempt_no", "lease_id",
		"max_attempts", "ack_timeout_ms", "params", "output", "artifacts", "expanded", "children_total",
		"children_pending", "children_running", "children_succeeded", "children_failed", "completed_at", "retry_base"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("insert steps: %w", err)
	}
	return nil
}

// UpdateStep writes a step's mutable fields.
func (t *Tx) UpdateStep(ctx context.Context, s *Step) error {
	artifacts, err := json.Marshal(nonNilArtifacts(s.Artifacts))
	if err != nil {
		return err
	}
	c := s.Children
	t.tx.holdOne(fmt.Sprintf("update step %s/%s", s.JobID, s.StepID), sqlUpdateStep, s.JobID, s.StepID, s.Status,
		s.AttemptNo, nullUUID(s.LeaseID), jsonOrNull(s.Params), jsonOrNull(s.Output), artifacts, s.FailureClass, s.Reason,
		s.Expanded, c.Total, c.Pending, c.Running, c.Succeeded, c.Failed, nullTime(s.StartedAt), nullTime(s.CompletedAt), s.RetryBase)
	return nil
}
