package pgbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// minRetry is the shortest wait between claims. An empty claim that saw
// available rows (other receivers were claiming them, or this claim
// dead-lettered them) retries after it instead of spinning.
const minRetry = 20 * time.Millisecond

// receiver takes messages from one path with peek-lock.
type receiver struct {
	b         *Bus
	path      string // what is received: queue, subscription or a dead-letter queue
	owner     string // the queue or subscription whose options apply
	deadQueue string // the owner's dead-letter queue
	isDLQ     bool
	w         *waiter
	done      chan struct{}
	once      sync.Once
}

func (r *receiver) isClosed() bool {
	select {
	case <-r.done:
		return true
	case <-r.b.done:
		return true
	default:
		return false
	}
}

// Receive claims up to max messages. When there are none it waits for a
// wake-up (a send's notification, the Bus's poll) or the time the next
// message of the path becomes available. Claim errors are logged and retried
// until ctx ends; the last one is returned joined to ctx's error.
func (r *receiver) Receive(ctx context.Context, maxMessages int) ([]*bus.Received, error) {
	if maxMessages < 1 {
		return nil, fmt.Errorf("receive %s: max %d is less than 1", r.path, maxMessages)
	}
	var (
		woken   bool // took a wake-up signal that another receiver needs if this one leaves
		lastErr error
		backoff = minRetry
	)
	giveUp := func(err error) ([]*bus.Received, error) {
		if woken {
			r.w.wake()
		}
		if lastErr != nil {
			err = errors.Join(err, fmt.Errorf("receive %s: last claim: %w", r.path, lastErr))
		}
		return nil, err
	}
	quiet := r.w.quietFor() // the last claim left nothing: wait for a send first
	for {
		if r.isClosed() {
			return giveUp(fmt.Errorf("receive %s: %w", r.path, bus.ErrClosed))
		}
		var msgs []*bus.Received
		var more bool
		var wait time.Duration
		var err error
		if quiet > 0 {
			wait, quiet = quiet, 0
		} else if msgs, more, wait, err = r.claim(ctx, maxMessages); err == nil && !more {
			r.w.setQuiet(wait) // nothing left to claim: this process's receivers wait for a send
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return giveUp(ctx.Err())
		case err != nil:
			r.b.log.WarnContext(ctx, "bus claim", "path", r.path, "error", err, "retry_in", backoff)
			lastErr, wait = err, backoff
			backoff = min(2*backoff, r.b.cfg.PollInterval)
			r.w.setQuiet(0)
		case len(msgs) > 0:
			if more {
				r.w.wake() // let another receiver take the rest
			}
			return msgs, nil
		default:
			woken, lastErr, backoff = false, nil, minRetry
		}
		switch r.wait(ctx, wait) {
		case waitCancelled:
			return giveUp(ctx.Err())
		case waitClosed:
			return giveUp(fmt.Errorf("receive %s: %w", r.path, bus.ErrClosed))
		case waitWoken:
			woken = true
		}
	}
}

type waitEnd int

const (
	waitElapsed waitEnd = iota
	waitWoken
	waitCancelled
	waitClosed
)

// wait waits d (untilWoken: with no timer) for a wake-up of the path.
func (r *receiver) wait(ctx context.Context, d time.Duration) waitEnd {
	var elapsed <-chan time.Time
	if d != untilWoken {
		timer := time.NewTimer(d)
		defer timer.Stop()
		elapsed = timer.C
	}
	select {
	case <-ctx.Done():
		return waitCancelled
	case <-r.done:
		return waitClosed
	case <-r.b.done:
		return waitClosed
	case <-r.w.ch:
		return waitWoken
	case <-elapsed:
		return waitElapsed
	}
}

// claimedRow is one row of qClaim; the message columns are NULL when the
// claim took nothing.
type claimedRow struct {
	ttlExpired    int64 // dead-lettered for their TTL
	maxDelivered  int64 // dead-lettered for their delivery count
	dropped       int64 // expired and dropped
	more          bool
	nextInUS      *int64
	seq           *int64
	id            *string
	body          []byte
	contentType   *string
	properties    map[string]string
	key           *string
	correlationID *string
	subject       *string
	deliveryCount *int32
	enqueuedAt    *time.Time
	lockedUntil   *time.Time
	lockToken     *string
	expiresAt     *time.Time
	dlReason      *string
	dlDescription *string
}

func (c *claimedRow) received() *bus.Received {
	m := &bus.Received{
		Message: bus.Message{
			ID:            *c.id,
			Body:          c.body,
			ContentType:   *c.contentType,
			Key:           *c.key,
			CorrelationID: *c.correlationID,
			Subject:       *c.subject,
			TTL:           c.expiresAt.Sub(*c.enqueuedAt),
		},
		SequenceNumber:        *c.seq,
		DeliveryCount:         int(*c.deliveryCount),
		EnqueuedAt:            *c.enqueuedAt,
		LockedUntil:           *c.lockedUntil,
		DeadLetterReason:      *c.dlReason,
		DeadLetterDescription: *c.dlDescription,
		LockToken:             *c.lockToken,
	}
	if len(c.properties) > 0 {
		m.Properties = c.properties
	}
	return m
}

// claim runs one claim. It reports whether more messages were available than
// it took, and how long to wait before the next claim if it took none: until
// the earliest scheduled message or lock expiry of the path, or untilWoken
// when the path is empty.
func (r *receiver) claim(ctx context.Context, maxMessages int) (msgs []*bus.Received, more bool, wait time.Duration, err error) {
	r.b.claims.Add(1)
	start := time.Now()
	rows, err := r.b.pool.Query(ctx, qClaim, r.path, r.owner, maxMessages, r.isDLQ, r.deadQueue)
	if err != nil {
		return nil, false, 0, fmt.Errorf("claim %s: %w", r.path, err)
	}
	var c claimedRow
	for rows.Next() {
		c = claimedRow{}
		err = rows.Scan(&c.ttlExpired, &c.maxDelivered, &c.dropped, &c.more, &c.nextInUS, &c.seq, &c.id, &c.body, &c.contentType,
			&c.properties, &c.key, &c.correlationID, &c.subject, &c.deliveryCount, &c.enqueuedAt,
			&c.lockedUntil, &c.lockToken, &c.expiresAt, &c.dlReason, &c.dlDescription)
		if err != nil {
			rows.Close()
			return nil, false, 0, fmt.Errorf("claim %s: scan: %w", r.path, err)
		}
		if c.seq != nil {
			msgs = append(msgs, c.received())
		}
	}
	if err = rows.Err(); err != nil {
		return nil, false, 0, fmt.Errorf("claim %s: %w", r.path, err)
	}
	if c.ttlExpired+c.maxDelivered > 0 {
		r.b.announce([]string{r.deadQueue})
	}
	tel := r.b.tel
	tel.DeadLettered(ctx, r.path, bus.ReasonTTLExpired, c.ttlExpired)
	tel.DeadLettered(ctx, r.path, bus.ReasonMaxDeliveryCountExceeded, c.maxDelivered)
	tel.Expired(ctx, r.path, c.dropped)
	if len(msgs) > 0 {
		tel.Received(ctx, r.path, start, msgs)
	}
	wait = untilWoken
	if c.nextInUS != nil {
		// A millisecond late, so the row is due by the database's clock too.
		wait = max(time.Duration(*c.nextInUS)*time.Microsecond+time.Millisecond, minRetry)
	}
	return msgs, c.more, wait, nil
}

// lockOf checks that m can be settled by this receiver.
func (r *receiver) lockOf(op string, m *bus.Received) error {
	if r.isClosed() {
		return fmt.Errorf("%s on %s: %w", op, r.path, bus.ErrClosed)
	}
	if m == nil {
		return fmt.Errorf("%s on %s: nil message", op, r.path)
	}
	if !isUUID(m.LockToken) {
		return fmt.Errorf("%s %s seq %d: lock token %q: %w", op, r.path, m.SequenceNumber, m.LockToken, bus.ErrLockLost)
	}
	return nil
}

// Complete removes the message. Concurrent completions share statements.
func (r *receiver) Complete(ctx context.Context, m *bus.Received) error {
	if err := r.lockOf("complete", m); err != nil {
		r.b.tel.LockLost(ctx, r.path, bustel.Complete, err)
		return err
	}
	err := r.b.completer.complete(ctx, r.b.done, m.SequenceNumber, m.LockToken, r.path)
	if err != nil {
		r.b.tel.LockLost(ctx, r.path, bustel.Complete, err)
		return err
	}
	r.b.tel.Settled(ctx, r.path, bustel.Complete)
	return nil
}

// Abandon releases the lock so the message is delivered again at once, or
// dead-letters it if it has used up its deliveries.
func (r *receiver) Abandon(ctx context.Context, m *bus.Received) error {
	if err := r.lockOf("abandon", m); err != nil {
		r.b.tel.LockLost(ctx, r.path, bustel.Abandon, err)
		return err
	}
	var path string
	err := r.b.pool.QueryRow(ctx, qAbandon, m.SequenceNumber, m.LockToken, r.path,
		r.deadQueue, r.isDLQ, r.owner, bus.PriorityHeadStart.Microseconds()).Scan(&path)
	if errors.Is(err, pgx.ErrNoRows) {
		r.b.tel.LockLost(ctx, r.path, bustel.Abandon, bus.ErrLockLost)
		return fmt.Errorf("abandon %s seq %d: %w", r.path, m.SequenceNumber, bus.ErrLockLost)
	}
	if err != nil {
		return fmt.Errorf("abandon %s seq %d: %w", r.path, m.SequenceNumber, err)
	}
	r.b.tel.Settled(ctx, r.path, bustel.Abandon)
	if path == r.deadQueue && !r.isDLQ { // it had used up its deliveries
		r.b.tel.DeadLettered(ctx, r.path, bus.ReasonMaxDeliveryCountExceeded, 1)
	}
	r.b.announce([]string{path})
	return nil
}

// DeadLetter moves the message to the dead-letter queue with reason and
// description. Messages of a dead-letter queue cannot be dead-lettered again.
func (r *receiver) DeadLetter(ctx context.Context, m *bus.Received, reason, description string) error {
	if err := r.lockOf("dead-letter", m); err != nil {
		r.b.tel.LockLost(ctx, r.path, bustel.DeadLetter, err)
		return err
	}
	if r.isDLQ {
		return fmt.Errorf("dead-letter %s seq %d: the message is in a dead-letter queue already", r.path, m.SequenceNumber)
	}
	tag, err := r.b.pool.Exec(ctx, qDeadLetter, m.SequenceNumber, m.LockToken, r.path,
		r.deadQueue, reason, description)
	if err != nil {
		return fmt.Errorf("dead-letter %s seq %d: %w", r.path, m.SequenceNumber, err)
	}
	if tag.RowsAffected() == 0 {
		r.b.tel.LockLost(ctx, r.path, bustel.DeadLetter, bus.ErrLockLost)
		return fmt.Errorf("dead-letter %s seq %d: %w", r.path, m.SequenceNumber, bus.ErrLockLost)
	}
	r.b.tel.Settled(ctx, r.path, bustel.DeadLetter)
	r.b.tel.DeadLettered(ctx, r.path, bustel.ReasonApplication, 1)
	r.b.announce([]string{r.deadQueue})
	return nil
}

// RenewLock extends the lock by the entity's lock duration from now and
// updates m.LockedUntil.
func (r *receiver) RenewLock(ctx context.Context, m *bus.Received) (time.Time, error) {
	if err := r.lockOf("renew lock", m); err != nil {
		r.b.tel.LockLost(ctx, r.path, bustel.Renew, err)
		return time.Time{}, err
	}
	var until time.Time
	err := r.b.pool.QueryRow(ctx, qRenewLock, m.SequenceNumber, m.LockToken, r.path, r.owner).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		r.b.tel.LockLost(ctx, r.path, bustel.Renew, bus.ErrLockLost)
		return time.Time{}, fmt.Errorf("renew lock %s seq %d: %w", r.path, m.SequenceNumber, bus.ErrLockLost)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("renew lock %s seq %d: %w", r.path, m.SequenceNumber, err)
	}
	r.b.tel.Renewed(ctx, r.path)
	m.LockedUntil = until
	return until, nil
}

// Close stops the receiver. Messages it holds stay locked until their locks
// expire, as in Service Bus.
func (r *receiver) Close(context.Context) error {
	r.once.Do(func() {
		close(r.done)
		r.b.unregister(r.w)
	})
	return nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
