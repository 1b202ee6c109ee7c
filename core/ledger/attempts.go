package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DetachedDirective returns the directive DetachDirective kept for an
// attempt, and the attempt's lease id. ErrNotFound when there is no such
// attempt or it was sent whole.
func (s *Store) DetachedDirective(ctx context.Context, jobID, stepID string, attemptNo int) (directive []byte, leaseID string, err error) {
	err = s.pool.QueryRow(ctx, sqlDetachedDirective, jobID, stepID, attemptNo).Scan(&leaseID, &directive)
	if isNoRows(err) || (err == nil && directive == nil) {
		return nil, "", fmt.Errorf("detached directive %s/%s#%d: %w", jobID, stepID, attemptNo, ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("detached directive %s/%s#%d: %w", jobID, stepID, attemptNo, err)
	}
	return directive, leaseID, nil
}

// HasPendingDirective reports whether an attempt's directive still waits in the outbox.
func (t *Tx) HasPendingDirective(ctx context.Context, k AttemptKey) (bool, error) {
	var pending bool
	err := t.tx.QueryRow(ctx, sqlPendingOutbox, k.JobID, k.StepID, k.AttemptNo).Scan(&pending)
	return pending, err
}

// DirectiveCount counts the directives ever enqueued for an attempt.
func (t *Tx) DirectiveCount(ctx context.Context, k AttemptKey) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx, sqlCountDirectives, k.JobID, k.StepID, k.AttemptNo).Scan(&n)
	return n, err
}

// LockCallback reads what a worker's callback names, in one round trip: the
// job and the step, locked in that order as LockJob and LockStep lock them
// (ErrNotFound when either is missing; the job is returned when only the
// step is), and the attempt, nil when the step has no such attempt.
func (t *Tx) LockCallback(ctx context.Context, jobID, stepID string, attemptNo int) (*Job, *Step, *Attempt, error) {
	b := &pgx.Batch{}
	b.Queue(sqlLockJob, jobID)
	b.Queue(sqlStep+` FOR UPDATE`, jobID, stepID)
	b.Queue(sqlAttempt, jobID, stepID, attemptNo)
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	job, err := scanJob(br.QueryRow())
	if isNoRows(err) {
		return nil, nil, nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lock job %s: %w", jobID, err)
	}
	st, err := scanStep(br.QueryRow())
	if isNoRows(err) {
		return job, nil, nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, ErrNotFound)
	}
	if err != nil {
		return job, nil, nil, fmt.Errorf("step %s/%s: %w", jobID, stepID, err)
	}
	a, err := scanAttempt(br.QueryRow())
	if isNoRows(err) {
		a, err = nil, nil
	}
	if err != nil {
		return job, nil, nil, fmt.Errorf("attempt %s/%s#%d: %w", jobID, stepID, attemptNo, err)
	}
	if err := br.Close(); err != nil {
		return job, nil, nil, err
	}
	return job, &st, a, nil
}

// Attempt returns one attempt of a step.
func (t *Tx) Attempt(ctx context.Context, jobID, stepID string, attemptNo int) (*Attempt, error) {
	a, err := scanAttempt(t.tx.QueryRow(ctx, sqlAttempt, jobID, stepID, attemptNo))
	if isNoRows(err) {
		return nil, fmt.Errorf("attempt %s/%s#%d: %w", jobID, stepID, attemptNo, ErrNotFound)
	}
	return a, err
}

// InsertAttempt creates an attempt with its pinned routing.
func (t *Tx) InsertAttempt(ctx context.Context, a *Attempt) error {
	t.tx.hold(fmt.Sprintf("insert attempt %s/%s#%d", a.JobID, a.StepID, a.AttemptNo), sqlInsertAttempt,
		a.JobID, a.StepID, a.AttemptNo, a.LeaseID, a.Status, a.Routing.Mode, a.Routing.Partition, a.Routing.RoutingKey,
		a.Routing.Topic, a.Routing.DecisionSource, a.Routing.DecisionReason, nullTime(a.AckDeadline))
	return nil
}

// SchedulePoll sets when a step waiting in POLLING is dispatched again,
// recording now as the start of its polling when it starts; PollDispatched
// clears the time once that poll is dispatched; EndPoll forgets the polling
// of a step that left it; PollStarted returns when it started (zero: the
// step is not polling on a schedule).
func (t *Tx) SchedulePoll(ctx context.Context, jobID, stepID string, now, next time.Time) error {
	t.tx.hold(fmt.Sprintf("schedule poll %s/%s", jobID, stepID), sqlSchedulePoll, jobID, stepID, now, next)
	return nil
}

// PollDispatched is described with SchedulePoll.
func (t *Tx) PollDispatched(ctx context.Context, jobID, stepID string) error {
	t.tx.hold(fmt.Sprintf("poll dispatched %s/%s", jobID, stepID), sqlPollDispatched, jobID, stepID)
	return nil
}

// EndPoll is described with SchedulePoll.
func (t *Tx) EndPoll(ctx context.Context, jobID, stepID string) error {
	t.tx.hold(fmt.Sprintf("end poll %s/%s", jobID, stepID), sqlEndPoll, jobID, stepID)
	return nil
}

// PollStarted is described with SchedulePoll.
func (t *Tx) PollStarted(ctx context.Context, jobID, stepID string) (time.Time, error) {
	var started time.Time
	err := t.tx.QueryRow(ctx, sqlPollStarted, jobID, stepID).Scan(&started)
	if isNoRows(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("poll of %s/%s: %w", jobID, stepID, err)
	}
	return started, nil
}

// DetachDirective keeps the whole directive of an attempt (inserted in this
// transaction) whose bus message carries it detached; DetachedDirective
// returns it.
func (t *Tx) DetachDirective(ctx context.Context, jobID, stepID string, attemptNo int, directive []byte) error {
	t.tx.holdOne(fmt.Sprintf("detach directive %s/%s#%d", jobID, stepID, attemptNo), sqlDetachDirective,
		jobID, stepID, attemptNo, directive)
	return nil
}

// UpdateAttempt writes an attempt's mutable fields. Routing never changes.
func (t *Tx) UpdateAttempt(ctx context.Context, a *Attempt) error {
	t.tx.holdOne(fmt.Sprintf("update attempt %s/%s#%d", a.JobID, a.StepID, a.AttemptNo), sqlUpdateAttempt,
		a.JobID, a.StepID, a.AttemptNo, a.Status, a.WorkerID, a.FailureClass, a.Reason, nullTime(a.AckedAt),
		nullTime(a.LeaseExpiresAt), nullTime(a.CompletedAt), nullTime(a.LastHeartbeatAt), jsonOrNull(a.Progress))
	return nil
}
