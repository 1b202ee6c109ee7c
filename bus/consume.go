package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
)

// ConsumeOptions shape a Consume loop.
type ConsumeOptions struct {
	// Batch is the most messages one Receive asks for (default 1).
	Batch int
	// Concurrency is how many messages are handled at once (default 1: one
	// after another, in the order received).
	Concurrency int
	// RetryDelay is the pause after a failed Receive (default 1s).
	RetryDelay time.Duration
	// OnError hears each failed Receive before the pause.
	OnError func(context.Context, error)
}

// Consume receives from r until ctx ends or r is closed and hands every
// message to handle, which settles it. It returns once every handle it
// started has returned.
func Consume(ctx context.Context, r Receiver, opts ConsumeOptions, handle func(context.Context, *Received)) {
	batch, concurrency, delay := max(opts.Batch, 1), max(opts.Concurrency, 1), opts.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msgs, err := r.Receive(ctx, batch)
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return
		}
		if err != nil {
			if opts.OnError != nil {
				opts.OnError(ctx, err)
			}
			loop.Sleep(ctx, delay)
			continue
		}
		for _, m := range msgs {
			if concurrency == 1 {
				handle(ctx, m)
				continue
			}
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				handle(ctx, m)
			}()
		}
	}
}
