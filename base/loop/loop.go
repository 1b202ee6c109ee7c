// Package loop runs the periodic maintenance work of Lucius processes
// (heartbeats, orphan scans, purges, sweepers) the same way everywhere, and
// the waits that give way when their context ends.
package loop

import (
	"context"
	"time"
)

// Every calls fn once per interval until ctx ends. With now set, the first
// call is immediate; otherwise it comes after one interval.
func Every(ctx context.Context, interval time.Duration, now bool, fn func(ctx context.Context)) {
	if now {
		fn(ctx)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// Drain calls batch until it handles fewer than limit rows, fails, or ctx ends,
// and returns the total handled. Each call gets its own timeout.
func Drain(ctx context.Context, limit int, timeout time.Duration, batch func(ctx context.Context, limit int) (int64, error)) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		bctx, cancel := context.WithTimeout(ctx, timeout)
		n, err := batch(bctx, limit)
		cancel()
		total += n
		if err != nil || n < int64(limit) {
			return total, err
		}
	}
	return total, ctx.Err()
}

// Sleep waits for d or until ctx ends, and reports whether the whole of d
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
