package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxClaim says which unsent messages to claim.
type OutboxClaim struct {
	Limit int
	// Lease hides the claimed messages from other claimers for this long.
	Lease time.Duration
	// Kinds claims only these kinds (all when empty); Exclude claims every kind but these.
	Kinds   []string
	Exclude bool
}

// ClaimOutbox leases up to Limit unsent messages: other dispatchers skip them
// until the lease runs out, so a dispatcher that dies mid-publish only delays
// its batch. Publishing twice is harmless: message ids are stable.
func (s *Store) ClaimOutbox(ctx context.Context, c OutboxClaim) ([]OutboxMessage, error) {
	kinds, include := c.kinds()
	return claimOutbox(ctx, s.pool, sqlClaimOutbox, c.Limit, kinds, include, c.Lease.Seconds())
}

// kinds returns the claim's kinds and whether they are the ones to include
// (otherwise the ones to leave).
func (c OutboxClaim) kinds() ([]string, bool) {
	if len(c.Kinds) == 0 {
		return []string{}, false // none named, none left: all
	}
	return c.Kinds, !c.Exclude
}

func claimOutbox(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]OutboxMessage, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxMessage, error) { return scanOutbox(row) })
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	return msgs, nil
}

// PublishOutbox publishes up to c.Limit unsent messages (c.Lease unused) in
// one transaction: it locks them (other dispatchers skip them), hands them to
// publish with the transaction, marks them sent as MarkSent does, and
// commits. For a bus in the ledger's database publish writes with tx, so a
// message is on the bus exactly when it is marked sent, in one commit
// instead of a claim, a send and a mark. An error from publish rolls
// everything back. It returns how many messages were published.
func (s *Store) PublishOutbox(ctx context.Context, c OutboxClaim, publish func(ctx context.Context, tx pgx.Tx, msgs []OutboxMessage) error) (int, error) {
	var n int
	err := s.InTx(ctx, func(tx *Tx) error {
		n = 0
		kinds, include := c.kinds()
		msgs, err := claimOutbox(ctx, tx.tx, sqlClaimOutboxSent, c.Limit, kinds, include)
		if err != nil || len(msgs) == 0 {
			return err
		}
		if err := publish(ctx, tx.tx, msgs); err != nil {
			return err
		}
		marked := make([]sentRow, len(msgs))
		for i, m := range msgs {
			marked[i] = sentRow{kind: m.Kind, jobID: m.JobID, stepID: m.StepID, attemptNo: m.AttemptNo}
		}
		n = len(msgs)
		return tx.published(ctx, marked)
	})
	return n, err
}

// sentRow is what marking a message sent implies a change for.
type sentRow struct {
	kind, jobID, stepID string
	attemptNo           int
}

// MarkSent records that messages reached the bus, and moves what that implies:
// a published job request makes the job QUEUED (event JOB_QUEUED); a published
// directive moves its step from DISPATCHING to AWAITING_ACK.
func (s *Store) MarkSent(ctx context.Context, msgs []OutboxMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return s.InTx(ctx, func(tx *Tx) error {
		rows, err := tx.tx.Query(ctx, sqlMarkSent, ids)
		if err != nil {
			return fmt.Errorf("mark sent: %w", err)
		}
		marked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sentRow, error) {
			var m sentRow
			return m, row.Scan(&m.kind, &m.jobID, &m.stepID, &m.attemptNo)
		})
		if err != nil {
			return fmt.Errorf("mark sent: %w", err)
		}
		return tx.published(ctx, marked)
	})
}

// published records what publishing the marked messages implies (see MarkSent).
func (t *Tx) published(ctx context.Context, marked []sentRow) error {
	var jobs, steps []string
	var attempts []int32
	for _, m := range marked {
		switch m.kind {
		case KindJobRequest:
			t.Append(Event{JobID: m.jobID, Type: EventJobQueued, FromStatus: string(JobReceived), ToStatus: string(JobQueued)})
		case KindDirective:
			jobs, steps, attempts = append(jobs, m.jobID), append(steps, m.stepID), append(attempts, int32(m.attemptNo))
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	rows, err := t.tx.Query(ctx, sqlStepsPublished, jobs, steps, attempts)
	if err != nil {
		return fmt.Errorf("steps published: %w", err)
	}
	moved, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sentRow, error) {
		var m sentRow
		return m, row.Scan(&m.jobID, &m.stepID, &m.attemptNo)
	})
	if err != nil {
		return fmt.Errorf("steps published: %w", err)
	}
	for _, m := range moved {
		t.Append(Event{JobID: m.jobID, StepID: m.stepID, AttemptNo: m.attemptNo, Type: EventStepStatusChanged,
			FromStatus: string(StepDispatching), ToStatus: string(StepAwaitingAck), Reason: "DIRECTIVE_PUBLISHED"})
	}
	return nil
}

// ReleaseOutbox returns a message that could not be published, to be retried
// after retryAfter, and records the cause.
func (s *Store) ReleaseOutbox(ctx context.Context, id int64, cause string, retryAfter time.Duration) error {
	if _, err := s.pool.Exec(ctx, sqlReleaseOutbox, id, cause, retryAfter.Seconds()); err != nil {
		return fmt.Errorf("release outbox %d: %w", id, err)
	}
	return nil
}

// AbandonOutbox gives up on a message for good, recording why.
func (s *Store) AbandonOutbox(ctx context.Context, id int64, cause string) error {
	if _, err := s.pool.Exec(ctx, sqlAbandonOutbox, id, cause); err != nil {
		return fmt.Errorf("abandon outbox %d: %w", id, err)
	}
	return nil
}

// RecordEvents appends events outside any state change (e.g. a delivery attempt).
func (s *Store) RecordEvents(ctx context.Context, events ...Event) error {
	return s.InTx(ctx, func(tx *Tx) error {
		tx.Append(events...)
		return nil
	})
}

// PurgeSentOutbox deletes up to limit messages sent more than olderThan ago.
func (s *Store) PurgeSentOutbox(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, sqlPurgeSent, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge outbox: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OutboxBacklog reports how many messages wait and the age of the oldest.
func (s *Store) OutboxBacklog(ctx context.Context) (int64, time.Duration, error) {
	var n int64
	var age float64
	if err := s.pool.QueryRow(ctx, sqlOutboxBacklog).Scan(&n, &age); err != nil {
		return 0, 0, fmt.Errorf("outbox backlog: %w", err)
	}
	return n, time.Duration(age * float64(time.Second)), nil
}

// StaleOutboxRow is an outbox message unsent for too long.
type StaleOutboxRow struct {
	ID                               int64
	Kind, Destination, JobID, StepID string
	AttemptNo, Attempts              int
	LastError                        string
}

// StaleOutbox reports (once each) messages unsent for longer than age and
// makes those that failed to publish available again at once.
func (s *Store) StaleOutbox(ctx context.Context, age time.Duration, limit int) ([]StaleOutboxRow, error) {
	rows, err := s.pool.Query(ctx, sqlStaleOutbox, limit, age.Seconds())
	if err != nil {
		return nil, fmt.Errorf("stale outbox: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StaleOutboxRow, error) {
		var r StaleOutboxRow
		return r, row.Scan(&r.ID, &r.Kind, &r.Destination, &r.JobID, &r.StepID, &r.AttemptNo, &r.Attempts, &r.LastError)
	})
}

// Enqueue records messages to publish, written when the transaction commits.
func (t *Tx) Enqueue(msgs ...OutboxMessage) { t.outbox = append(t.outbox, msgs...) }

// InOutbox returns the message ids among ids that the outbox holds already
// (sent or not): a producer that decides a message twice leaves it out
// instead of failing its commit on the unique message id.
func (t *Tx) InOutbox(ctx context.Context, ids []string) ([]string, error) {
	rows, err := t.tx.Query(ctx, sqlOutboxIDs, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox ids: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
