// Package retry spaces out retries: the n-th delay of an exponential backoff,
// computed by github.com/cenkalti/backoff/v5, for the places that keep a
// retry count and ask for its delay (a workflow step's retry policy, the
// completion webhooks, a worker's callbacks) rather than loop in place.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Delay is the wait before retry n (n from 0: the first retry waits about
// initial): initial multiplied by multiplier per retry, at most max, spread
// by ±jitter (a fraction, 0 for none) and never above max. A multiplier of
// 1 keeps every delay at initial.
func Delay(initial, max time.Duration, multiplier, jitter float64, n int) time.Duration {
	if initial <= 0 {
		return 0
	}
	b := &backoff.ExponentialBackOff{InitialInterval: initial, MaxInterval: max, Multiplier: multiplier,
		RandomizationFactor: jitter}
	b.Reset()
	// Once the interval reaches max it stays there: no need to step further.
	steps := min(n, 64)
	var d time.Duration
	for range steps + 1 {
		d = b.NextBackOff()
	}
	return min(d, max)
}
