package membus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// receiver takes messages from a queue, a subscription or the dead-letter
// queue of either, with peek-lock.
type receiver struct {
	b    *Bus
	e    *entity // the queue or subscription, whose options apply
	path string
	dlq  bool
	done chan struct{}
	once sync.Once
}

func (r *receiver) closed() bool {
	select {
	case <-r.done:
		return true
	default:
		return r.b.closed()
	}
}

// messages is what r receives from: e's live or dead messages. Call with
// b.mu held.
func (r *receiver) messages() map[int64]*message { return r.e.messages(r.dlq) }

// Receive takes up to max messages. When there are none it waits until the
// entity changes, a lock expires or a scheduled message falls due there, ctx
// ends (returning ctx's error) or the receiver or bus closes.
func (r *receiver) Receive(ctx context.Context, max int) ([]*bus.Received, error) {
	if max < 1 {
		return nil, fmt.Errorf("membus: receive %s: max %d is less than 1", r.path, max)
	}
	start := time.Now()
	for {
		r.b.mu.Lock()
		if r.closed() {
			r.b.mu.Unlock()
			return nil, fmt.Errorf("membus: receive %s: %w", r.path, bus.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			r.b.mu.Unlock()
			return nil, err
		}
		got, next, sw := r.e.take(time.Now(), r.dlq, max)
		changed := r.e.changed
		r.b.mu.Unlock()

		r.b.tel.DeadLettered(ctx, r.path, bus.ReasonTTLExpired, sw.ttl)
		r.b.tel.DeadLettered(ctx, r.path, bus.ReasonMaxDeliveryCountExceeded, sw.maxDelivered)
		r.b.tel.Expired(ctx, r.path, sw.dropped)
		if len(got) > 0 {
			r.b.tel.Received(ctx, r.path, start, got)
			return got, nil
		}
		if err := r.wait(ctx, changed, next); err != nil {
			return nil, err
		}
	}
}

// wait returns when changed is closed or next (unless zero) has come, or
// with ctx's error when ctx ends first. Closing is left to Receive to report.
func (r *receiver) wait(ctx context.Context, changed <-chan struct{}, next time.Time) error {
	var due <-chan time.Time
	if !next.IsZero() {
		timer := time.NewTimer(time.Until(next))
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
	case <-r.b.done:
	case <-changed:
	case <-due:
	}
	return nil
}

// settle runs fn on m's message if m still holds its lock, under b.mu, and
// counts the outcome op or the lost lock.
func (r *receiver) settle(ctx context.Context, op bustel.Op, m *bus.Received, fn func(msg *message, now time.Time) error) error {
	err := r.locked(op, m, fn)
	switch {
	case err == nil && op != bustel.Renew:
		r.b.tel.Settled(ctx, r.path, op)
	case err == nil:
		r.b.tel.Renewed(ctx, r.path)
	default:
		r.b.tel.LockLost(ctx, r.path, op, err)
	}
	return err
}

func (r *receiver) locked(op bustel.Op, m *bus.Received, fn func(msg *message, now time.Time) error) error {
	if m == nil {
		return fmt.Errorf("membus: %s on %s: nil message", op, r.path)
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.closed() {
		return fmt.Errorf("membus: %s %s seq %d: %w", op, r.path, m.SequenceNumber, bus.ErrClosed)
	}
	now := time.Now()
	// A message settled, or redelivered after its lock expired, no longer
	// carries this delivery's token; one whose lock expired unclaimed still
	// does, so the expiry is checked too.
	msg := r.messages()[m.SequenceNumber]
	if msg == nil || msg.lockToken != m.LockToken || !msg.locked(now) {
		return fmt.Errorf("membus: %s %s seq %d: %w", op, r.path, m.SequenceNumber, bus.ErrLockLost)
	}
	return fn(msg, now)
}

// Complete removes the message.
func (r *receiver) Complete(ctx context.Context, m *bus.Received) error {
	return r.settle(ctx, bustel.Complete, m, func(msg *message, _ time.Time) error {
		delete(r.messages(), msg.seq)
		return nil
	})
}

// Abandon releases the lock so the message is delivered again at once, in
// its place in line, or dead-letters it if it has used up its deliveries.
func (r *receiver) Abandon(ctx context.Context, m *bus.Received) error {
	exhausted := false
	err := r.settle(ctx, bustel.Abandon, m, func(msg *message, now time.Time) error {
		msg.lockToken, msg.lockedUntil = "", time.Time{}
		if exhausted = !r.dlq && msg.deliveries >= r.e.maxDeliveries; exhausted {
			r.e.maxDeliveriesExceeded(msg, now)
		}
		r.e.notify()
		return nil
	})
	if exhausted {
		r.b.tel.DeadLettered(ctx, r.path, bus.ReasonMaxDeliveryCountExceeded, 1)
	}
	return err
}

// DeadLetter moves the message to the dead-letter queue with reason and
// description. Messages of a dead-letter queue cannot be dead-lettered again.
func (r *receiver) DeadLetter(ctx context.Context, m *bus.Received, reason, description string) error {
	err := r.settle(ctx, bustel.DeadLetter, m, func(msg *message, now time.Time) error {
		if r.dlq {
			return fmt.Errorf("membus: dead-letter %s seq %d: the message is in a dead-letter queue already", r.path, msg.seq)
		}
		r.e.deadLetter(msg, now, reason, description)
		r.e.notify()
		return nil
	})
	if err == nil {
		r.b.tel.DeadLettered(ctx, r.path, bustel.ReasonApplication, 1)
	}
	return err
}

// RenewLock extends the lock by the entity's lock duration from now and
// updates m.LockedUntil.
func (r *receiver) RenewLock(ctx context.Context, m *bus.Received) (time.Time, error) {
	err := r.settle(ctx, bustel.Renew, m, func(msg *message, now time.Time) error {
		msg.lockedUntil = now.Add(r.e.lockDuration)
		m.LockedUntil = msg.lockedUntil
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return m.LockedUntil, nil
}

// Close stops the receiver. Messages it holds stay locked until their locks
// expire, as in Service Bus.
func (r *receiver) Close(context.Context) error {
	r.once.Do(func() { close(r.done) })
	return nil
}
