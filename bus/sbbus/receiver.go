package sbbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/google/uuid"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// NewReceiver receives from a queue, a subscription or a dead-letter queue
// with peek-lock. It peeks once, which opens the links and reports a missing
// entity (bus.ErrNotFound) here rather than on the first Receive.
func (b *Bus) NewReceiver(ctx context.Context, src bus.Source) (bus.Receiver, error) {
	if b.isClosed() {
		return nil, bus.ErrClosed
	}
	r, err := b.sdkReceiver(src)
	if err != nil {
		return nil, mapErr("new receiver "+src.Path(), err)
	}
	if _, err := r.PeekMessages(ctx, 1, nil); err != nil {
		r.Close(context.Background()) //nolint:errcheck
		if b.isClosed() {
			return nil, bus.ErrClosed
		}
		return nil, mapErr("new receiver "+src.Path(), err)
	}
	out := &receiver{b: b, r: r, src: src, path: src.Path(), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		r.Close(context.Background()) //nolint:errcheck
		return nil, bus.ErrClosed
	}
	b.receivers[out] = struct{}{}
	_ = b.tracked(src, nil) // with no error to pass on, it only starts tracking
	b.tel.Receiving(ctx, out.path)
	return out, nil
}

// sdkReceiver is an SDK peek-lock receiver of src (its dead-letter queue
// when src names it).
func (b *Bus) sdkReceiver(src bus.Source) (*azservicebus.Receiver, error) {
	opts := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock}
	if src.DeadLetter {
		opts.SubQueue = azservicebus.SubQueueDeadLetter
	}
	if src.Topic != "" {
		return b.client.NewReceiverForSubscription(src.Topic, src.Subscription, opts)
	}
	return b.client.NewReceiverForQueue(src.Queue, opts)
}

type receiver struct {
	b    *Bus
	r    *azservicebus.Receiver
	src  bus.Source
	path string // src.Path(), the entity of its metrics and spans

	once sync.Once
	done chan struct{}
}

// handle is what a Received carries to settle it.
type handle struct {
	r   *receiver
	msg *azservicebus.ReceivedMessage

	mu      sync.Mutex
	settled bool
}

func (r *receiver) closed() bool {
	select {
	case <-r.done:
		return true
	case <-r.b.done:
		return true
	default:
		return false
	}
}

// Receive waits for at least one message, up to max.
func (r *receiver) Receive(ctx context.Context, max int) ([]*bus.Received, error) {
	if max <= 0 {
		return nil, fmt.Errorf("sbbus: receive from %s: max %d is not positive", r.src, max)
	}
	for {
		if r.closed() {
			return nil, bus.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		msgs, err := r.receiveOnce(ctx, max)
		if r.closed() {
			r.abandonAll(msgs)
			return nil, bus.ErrClosed
		}
		if ctxErr := ctx.Err(); ctxErr != nil && len(msgs) == 0 {
			return nil, ctxErr
		}
		if err != nil && len(msgs) == 0 {
			return nil, mapErr("receive from "+r.src.Path(), err)
		}
		if len(msgs) > 0 {
			out := make([]*bus.Received, len(msgs))
			for i, m := range msgs {
				out[i] = r.fromSDK(m)
			}
			r.b.tel.Received(ctx, r.path, start, out)
			return out, nil
		}
		// The SDK returns nothing and no error after recovering a link: wait again.
	}
}

// receiveOnce calls the SDK, cancelled also when the receiver or bus closes.
func (r *receiver) receiveOnce(ctx context.Context, max int) ([]*azservicebus.ReceivedMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.done:
		case <-r.b.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	return r.r.ReceiveMessages(ctx, max, nil)
}

// abandonAll gives back messages received while the receiver closed.
func (r *receiver) abandonAll(msgs []*azservicebus.ReceivedMessage) {
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.r.AbandonMessage(ctx, m, nil) //nolint:errcheck // the lock expires anyway
		cancel()
	}
}

func (r *receiver) fromSDK(m *azservicebus.ReceivedMessage) *bus.Received {
	out := &bus.Received{
		Message: bus.Message{
			ID:   m.MessageID,
			Body: m.Body,
		},
		DeliveryCount: int(m.DeliveryCount),
		LockToken:     uuid.UUID(m.LockToken).String(),
	}
	out.Handle = &handle{r: r, msg: m}
	if m.ContentType != nil {
		out.ContentType = *m.ContentType
	}
	if m.CorrelationID != nil {
		out.CorrelationID = *m.CorrelationID
	}
	if m.Subject != nil {
		out.Subject = *m.Subject
	}
	if m.PartitionKey != nil {
		out.Key = *m.PartitionKey
	}
	if m.ScheduledEnqueueTime != nil {
		out.ScheduledAt = *m.ScheduledEnqueueTime
	}
	if m.TimeToLive != nil {
		out.TTL = *m.TimeToLive
	}
	if m.SequenceNumber != nil {
		out.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		out.EnqueuedAt = *m.EnqueuedTime
	}
	if m.LockedUntil != nil {
		out.LockedUntil = *m.LockedUntil
	}
	if m.DeadLetterReason != nil {
		out.DeadLetterReason = *m.DeadLetterReason
	}
	if m.DeadLetterErrorDescription != nil {
		out.DeadLetterDescription = *m.DeadLetterErrorDescription
	}
	if len(m.ApplicationProperties) > 0 {
		out.Properties = make(map[string]string, len(m.ApplicationProperties))
		for k, v := range m.ApplicationProperties {
			if r.src.DeadLetter && (k == "DeadLetterReason" || k == "DeadLetterErrorDescription") {
				continue // Service Bus adds these; they are the Received fields above
			}
			if s, ok := v.(string); ok {
				out.Properties[k] = s
			} else {
				out.Properties[k] = fmt.Sprint(v)
			}
		}
	}
	return out
}

// settle runs fn on m's message unless it was settled already; a success or a
// lost lock makes it settled. It counts the outcome op or the lost lock.
func (r *receiver) settle(ctx context.Context, m *bus.Received, what string, op bustel.Op, fn func(*azservicebus.ReceivedMessage) error) error {
	if r.closed() {
		return bus.ErrClosed
	}
	h, ok := m.Handle.(*handle)
	if !ok || h.r != r {
		return fmt.Errorf("sbbus: %s %s: the message was not received by this receiver", what, m.ID)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled {
		r.b.tel.LockLost(ctx, r.path, op, bus.ErrLockLost)
		return fmt.Errorf("sbbus: %s %s: already settled: %w", what, m.ID, bus.ErrLockLost)
	}
	err := mapErr(what+" "+m.ID, fn(h.msg))
	switch {
	case err == nil:
		h.settled = true
		r.b.tel.Settled(ctx, r.path, op)
	case errors.Is(err, bus.ErrLockLost):
		h.settled = true
		r.b.tel.LockLost(ctx, r.path, op, err)
	case r.closed():
		return bus.ErrClosed
	}
	return err
}

func (r *receiver) Complete(ctx context.Context, m *bus.Received) error {
	return r.settle(ctx, m, "complete", bustel.Complete, func(msg *azservicebus.ReceivedMessage) error {
		return r.r.CompleteMessage(ctx, msg, nil)
	})
}

func (r *receiver) Abandon(ctx context.Context, m *bus.Received) error {
	return r.settle(ctx, m, "abandon", bustel.Abandon, func(msg *azservicebus.ReceivedMessage) error {
		return r.r.AbandonMessage(ctx, msg, nil)
	})
}

func (r *receiver) DeadLetter(ctx context.Context, m *bus.Received, reason, description string) error {
	err := r.settle(ctx, m, "dead-letter", bustel.DeadLetter, func(msg *azservicebus.ReceivedMessage) error {
		return r.r.DeadLetterMessage(ctx, msg, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &description})
	})
	if err == nil {
		r.b.tel.DeadLettered(ctx, r.path, bustel.ReasonApplication, 1)
	}
	return err
}

// RenewLock extends m's lock by the entity's lock duration and updates m.LockedUntil.
func (r *receiver) RenewLock(ctx context.Context, m *bus.Received) (time.Time, error) {
	if r.closed() {
		return time.Time{}, bus.ErrClosed
	}
	h, ok := m.Handle.(*handle)
	if !ok || h.r != r {
		return time.Time{}, fmt.Errorf("sbbus: renew lock %s: the message was not received by this receiver", m.ID)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled {
		r.b.tel.LockLost(ctx, r.path, bustel.Renew, bus.ErrLockLost)
		return time.Time{}, fmt.Errorf("sbbus: renew lock %s: already settled: %w", m.ID, bus.ErrLockLost)
	}
	if err := r.r.RenewMessageLock(ctx, h.msg, nil); err != nil {
		err = mapErr("renew lock "+m.ID, err)
		if errors.Is(err, bus.ErrLockLost) {
			h.settled = true
			r.b.tel.LockLost(ctx, r.path, bustel.Renew, err)
		}
		return time.Time{}, err
	}
	r.b.tel.Renewed(ctx, r.path)
	if h.msg.LockedUntil != nil {
		m.LockedUntil = *h.msg.LockedUntil
	}
	return m.LockedUntil, nil
}

func (r *receiver) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		close(r.done)
		r.b.mu.Lock()
		delete(r.b.receivers, r)
		r.b.mu.Unlock()
		err = r.r.Close(ctx)
	})
	if err != nil && !r.b.isClosed() {
		return mapErr("close receiver "+r.src.Path(), err)
	}
	return nil
}

// KeepLock renews m's lock every interval (a third of the lock's remaining
// time when interval is zero) until the returned stop is called, ctx ends or
// a renewal fails; it serves handlers that outlast the entity's lock
// duration. It works with any bus.Receiver. While it runs it owns
// m.LockedUntil (RenewLock updates it): read that after stop.
func KeepLock(ctx context.Context, r bus.Receiver, m *bus.Received, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			wait := interval
			if wait <= 0 {
				wait = time.Until(m.LockedUntil) / 3
				if wait < 100*time.Millisecond {
					wait = 100 * time.Millisecond
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if _, err := r.RenewLock(ctx, m); err != nil {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
