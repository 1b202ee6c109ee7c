// Package breaker runs the circuit breakers that stop dispatch to a worker
// service that keeps failing (seed 002), one per service, kept in the
// ledger so every process agrees on them.
//
//   - CLOSED: directives flow. When at least MinAttempts attempts of the
//     service ended within Window (counted from its last close) and
//     FailurePercent of them or more failed RETRYABLE (a retryable RESULT,
//     an ACK timeout, an expired lease), the breaker opens.
//   - OPEN: every new attempt of the service is held: the step waits READY
//     with reason CIRCUIT_OPEN and no directive goes out. Jobs are never
//     failed for it; their SLA still bounds the wait. After CoolDown the
//     breaker turns HALF_OPEN.
//   - HALF_OPEN: new attempts are still held; Probes held steps are
//     released. A probe that fails RETRYABLE opens the breaker again; Probes
//     probes that end otherwise close it, and the held steps are released,
//     highest priority first. Probes with no outcome after CoolDown (their
//     jobs were cancelled, say) are replaced.
//
// Operators can list breakers and reset one to CLOSED through the API. The
// Monitor (in the reconciler) decides and releases; the Cache (in every
// process that dispatches) tells the engine which services are held.
package breaker

import (
	"errors"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Policy tunes the breakers. Zero values take the defaults noted.
type Policy struct {
	// Disabled turns breakers off: nothing is held (LUCIUS_BREAKER_ENABLED=false).
	Disabled bool
	// Window is how far back attempts count (default 60s; LUCIUS_BREAKER_WINDOW).
	Window time.Duration
	// MinAttempts is the fewest ended attempts that can open a breaker
	// (default 10; LUCIUS_BREAKER_MIN_ATTEMPTS).
	MinAttempts int
	// FailurePercent of those failing RETRYABLE opens it (default 50;
	// LUCIUS_BREAKER_FAILURE_PERCENT).
	FailurePercent int
	// CoolDown is how long it stays OPEN (default 30s; LUCIUS_BREAKER_COOL_DOWN).
	CoolDown time.Duration
	// Probes is how many held steps a HALF_OPEN breaker releases, and how
	// many must end well to close it (default 2; LUCIUS_BREAKER_PROBES).
	Probes int
	// Interval is how often the monitor decides and the caches refresh
	// (default 2s; LUCIUS_BREAKER_INTERVAL).
	Interval time.Duration
}

// PolicyFromEnv reads the LUCIUS_BREAKER_* variables.
func PolicyFromEnv(e *env.Reader) Policy {
	return Policy{
		Disabled:       !e.Bool("LUCIUS_BREAKER_ENABLED", true),
		Window:         e.Duration("LUCIUS_BREAKER_WINDOW", 0),
		MinAttempts:    e.Int("LUCIUS_BREAKER_MIN_ATTEMPTS", 0),
		FailurePercent: e.Int("LUCIUS_BREAKER_FAILURE_PERCENT", 0),
		CoolDown:       e.Duration("LUCIUS_BREAKER_COOL_DOWN", 0),
		Probes:         e.Int("LUCIUS_BREAKER_PROBES", 0),
		Interval:       e.Duration("LUCIUS_BREAKER_INTERVAL", 0),
	}
}

// WithDefaults fills zero values.
func (p Policy) WithDefaults() Policy {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&p.Window, time.Minute)
	set(&p.CoolDown, 30*time.Second)
	set(&p.Interval, 2*time.Second)
	if p.MinAttempts == 0 {
		p.MinAttempts = 10
	}
	if p.FailurePercent == 0 {
		p.FailurePercent = 50
	}
	if p.Probes == 0 {
		p.Probes = 2
	}
	return p
}

// Validate reports settings that cannot work.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	var errs []error
	if p.Window < 0 || p.CoolDown < 0 || p.Interval < 0 {
		errs = append(errs, errors.New("breaker: LUCIUS_BREAKER_WINDOW, _COOL_DOWN and _INTERVAL must not be negative"))
	}
	if p.MinAttempts < 1 || p.Probes < 1 {
		errs = append(errs, errors.New("breaker: LUCIUS_BREAKER_MIN_ATTEMPTS and LUCIUS_BREAKER_PROBES must be at least 1"))
	}
	if p.FailurePercent < 1 || p.FailurePercent > 100 {
		errs = append(errs, fmt.Errorf("breaker: LUCIUS_BREAKER_FAILURE_PERCENT is %d, want 1..100", p.FailurePercent))
	}
	if p.CoolDown > p.Window {
		// Probes are counted within the window: a round must end inside it.
		errs = append(errs, fmt.Errorf("breaker: LUCIUS_BREAKER_COOL_DOWN (%s) must not exceed LUCIUS_BREAKER_WINDOW (%s)", p.CoolDown, p.Window))
	}
	return errors.Join(errs...)
}

// Decision is what the monitor does with one breaker.
type Decision struct {
	// To is the state to move to; empty: stay.
	To     ledger.BreakerState
	Reason string
	// Release is how many held steps to dispatch now.
	Release int
	// RestartProbes starts a half-open probe round again (none came back).
	RestartProbes bool
}

// Decide applies the policy to breaker b, given the outcomes counted since
// its last transition, at now. held is how many steps it holds.
func (p Policy) Decide(b ledger.Breaker, o ledger.ServiceOutcomes, held int, now time.Time) Decision {
	switch b.State {
	case ledger.BreakerOpen:
		if !now.Before(b.RetryAt) {
			return Decision{To: ledger.BreakerHalfOpen, Reason: fmt.Sprintf("cool-down of %s over: probing", p.CoolDown)}
		}
	case ledger.BreakerHalfOpen:
		switch {
		case o.Failed > 0:
			return Decision{To: ledger.BreakerOpen, Reason: fmt.Sprintf("%d of %d probe attempts failed", o.Failed, o.Ended)}
		case o.Ended >= p.Probes:
			return Decision{To: ledger.BreakerClosed, Reason: fmt.Sprintf("%d probe attempts ended without a retryable failure", o.Ended),
				Release: held}
		case now.Sub(b.Since) >= p.CoolDown && b.Probes > 0:
			return Decision{RestartProbes: true, Release: min(p.Probes, held)}
		case b.Probes < p.Probes:
			return Decision{Release: min(p.Probes-b.Probes, held)}
		}
	default: // CLOSED, or never opened
		if o.Ended >= p.MinAttempts && o.Failed*100 >= p.FailurePercent*o.Ended {
			return Decision{To: ledger.BreakerOpen, Reason: fmt.Sprintf("%d of %d attempts in %s failed (at least %d%% opens it)",
				o.Failed, o.Ended, p.Window, p.FailurePercent)}
		}
		return Decision{Release: held} // held before it closed (a reset, a close)
	}
	return Decision{}
}

// Rate is o's failure rate (0 without attempts).
func Rate(o ledger.ServiceOutcomes) float64 {
	if o.Ended == 0 {
		return 0
	}
	return float64(o.Failed) / float64(o.Ended)
}
