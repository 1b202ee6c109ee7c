package process

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lucius-platform/lucius/base/env"
)

// Clock is the time the scheduler and the runbook executor decide with: the
// real time, or — only for tests and demos that compress time — a faster
// one. With LUCIUS_CLOCK_SPEEDUP=S (> 1) and LUCIUS_CLOCK_EPOCH=T (RFC 3339,
// required with it), now is T + (real − T) × S, the same in every process
// started with the same pair, so a runbook's minutes pass in seconds.
func Clock(e *env.Reader) (func() time.Time, error) {
	raw := e.String("LUCIUS_CLOCK_SPEEDUP", "")
	if raw == "" {
		return time.Now, nil
	}
	speedup, err := strconv.ParseFloat(raw, 64)
	if err != nil || speedup < 1 {
		return nil, fmt.Errorf("LUCIUS_CLOCK_SPEEDUP=%q: want a number of at least 1", raw)
	}
	epoch, err := time.Parse(time.RFC3339Nano, e.String("LUCIUS_CLOCK_EPOCH", ""))
	if err != nil {
		return nil, fmt.Errorf("LUCIUS_CLOCK_EPOCH (required with LUCIUS_CLOCK_SPEEDUP): %w", err)
	}
	return CompressedClock(epoch, speedup), nil
}

// CompressedClock returns epoch + (real − epoch) × speedup.
func CompressedClock(epoch time.Time, speedup float64) func() time.Time {
	return func() time.Time {
		return epoch.Add(time.Duration(float64(time.Since(epoch)) * speedup))
	}
}
