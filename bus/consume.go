package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
)

// ConsumeOptions shape a Consume loop. The zero value receives one message
// at a time and handles it before receiving the next.
type ConsumeOptions struct {
	// Batch is the most messages one Receive asks for (default 1).
	Batch int
	// Concurrency is how many messages are handled at once (default 1: one
	// after another, in the order received, a batch handled before the next
	// Receive).
	Concurrency int
	// Slots, when set, are execution slots shared with other Consume loops:
	// a handler holds one while it runs, so at most cap(Slots) handlers run
	// across every loop given the same channel. Concurrency is then ignored.
	// It must be buffered.
	Slots chan struct{}
	// RetryDelay is the pause after a failed Receive (default 1s).
	RetryDelay time.Duration
	// Backoff, when set, replaces RetryDelay: it gives the pause after a
	// failed Receive from the number of Receives that failed in a row
	// before it (0 for the first failure after a success).
	Backoff func(failures int) time.Duration
	// OnError hears each failed Receive, and the pause that follows it,
	// before the pause.
	OnError func(ctx context.Context, err error, retryIn time.Duration)
	// OnReceive, when set, is given each batch Receive returns before any
	// of its messages waits for a slot (to start renewing their locks).
	OnReceive func([]*Received)
	// OnDropped, when set, is given each received message that was never
	// handled because ctx ended while it waited for a slot; without it the
	// message is left to its lock's expiry.
	OnDropped func(*Received)
	// Handlers, when set, tracks the handlers Consume starts, and Consume
	// returns without waiting for them: the caller waits, for instance for
	// the handlers of several loops at once.
	Handlers *sync.WaitGroup
}

// Consume receives from r until ctx ends or r is closed and hands every
// message to handle, which settles it. Once ctx ends no handler is started;
// a handler already running is not interrupted (handle gets ctx, but may
// run on a longer-lived context of its own to finish its work). Consume
// returns once every handle it started has returned, unless opts.Handlers
// is set.
func Consume(ctx context.Context, r Receiver, opts ConsumeOptions, handle func(context.Context, *Received)) {
	batch := max(opts.Batch, 1)
	slots := opts.Slots
	if slots == nil {
		slots = make(chan struct{}, max(opts.Concurrency, 1))
	}
	// One at a time on a slot of its own: handle inline, so the next
	// Receive waits until the batch is handled.
	inline := opts.Slots == nil && cap(slots) == 1
	handlers := opts.Handlers
	if handlers == nil {
		handlers = &sync.WaitGroup{}
		defer handlers.Wait()
	}
	failures := 0
	for ctx.Err() == nil {
		msgs, err := r.Receive(ctx, batch)
		if errors.Is(err, ErrClosed) || (err != nil && ctx.Err() != nil) {
			return
		}
		if err != nil {
			wait := opts.retryDelay(failures)
			failures++
			if opts.OnError != nil {
				opts.OnError(ctx, err, wait)
			}
			loop.Sleep(ctx, wait)
			continue
		}
		failures = 0
		if opts.OnReceive != nil && len(msgs) > 0 {
			opts.OnReceive(msgs)
		}
		for i, m := range msgs {
			if !acquire(ctx, slots) {
				if opts.OnDropped != nil {
					for _, dropped := range msgs[i:] {
						opts.OnDropped(dropped)
					}
				}
				return
			}
			if inline {
				handle(ctx, m)
				<-slots
				continue
			}
			handlers.Go(func() {
				defer func() { <-slots }()
				handle(ctx, m)
			})
		}
	}
}

// retryDelay is the pause after a failed Receive that follows failures
// failed ones.
func (o ConsumeOptions) retryDelay(failures int) time.Duration {
	switch {
	case o.Backoff != nil:
		return o.Backoff(failures)
	case o.RetryDelay > 0:
		return o.RetryDelay
	default:
		return time.Second
	}
}

// acquire takes one of slots, or reports false once ctx has ended.
func acquire(ctx context.Context, slots chan struct{}) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}
