package breaker

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/core/ledger"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	p := Policy{MinAttempts: 10, FailurePercent: 50, CoolDown: 30 * time.Second, Probes: 2}.WithDefaults()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	closed := ledger.Breaker{Service: "ocr", State: ledger.BreakerClosed}
	open := ledger.Breaker{Service: "ocr", State: ledger.BreakerOpen, RetryAt: now.Add(time.Second)}
	half := ledger.Breaker{Service: "ocr", State: ledger.BreakerHalfOpen, Since: now.Add(-time.Second)}
	outcomes := func(ended, failed, succeeded int) ledger.ServiceOutcomes {
		return ledger.ServiceOutcomes{Service: "ocr", Ended: ended, Failed: failed, Succeeded: succeeded}
	}
	tests := []struct {
		name    string
		b       ledger.Breaker
		o       ledger.ServiceOutcomes
		held    int
		now     time.Time
		to      ledger.BreakerState
		release int
		restart bool
	}{
		{"closed, too few attempts", closed, outcomes(9, 9, 0), 0, now, "", 0, false},
		{"closed, rate below", closed, outcomes(10, 4, 6), 0, now, "", 0, false},
		{"closed, rate at the threshold opens", closed, outcomes(10, 5, 5), 0, now, ledger.BreakerOpen, 0, false},
		{"closed with held steps releases them", closed, outcomes(0, 0, 0), 7, now, "", 7, false},
		{"open, cooling down", open, outcomes(5, 5, 0), 3, now, "", 0, false},
		{"open, cool-down over", open, outcomes(5, 5, 0), 3, now.Add(time.Second), ledger.BreakerHalfOpen, 0, false},
		{"half-open releases its probes", half, outcomes(0, 0, 0), 5, now, "", 2, false},
		{"half-open, probes out", ledger.Breaker{State: ledger.BreakerHalfOpen, Since: now, Probes: 2}, outcomes(1, 0, 1), 5, now, "", 0, false},
		{"half-open, a probe failed", half, outcomes(2, 1, 1), 5, now, ledger.BreakerOpen, 0, false},
		{"half-open, probes ended well", half, outcomes(2, 0, 2), 5, now, ledger.BreakerClosed, 5, false},
		{"half-open, probes lost", ledger.Breaker{State: ledger.BreakerHalfOpen, Since: now.Add(-time.Minute), Probes: 2}, outcomes(0, 0, 0), 1, now, "", 1, true},
		{"half-open, nothing held", half, outcomes(0, 0, 0), 0, now, "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.b, tt.o, tt.held, tt.now)
			if d.To != tt.to || d.Release != tt.release || d.RestartProbes != tt.restart {
				t.Fatalf("Decide = %+v, want to %q release %d restart %v", d, tt.to, tt.release, tt.restart)
			}
			if d.To != "" && d.Reason == "" {
				t.Fatal("a transition without a reason")
			}
		})
	}
}

func TestPolicyFromEnvAndValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		valid bool
	}{
		{"defaults", nil, true},
		{"tuned", map[string]string{"LUCIUS_BREAKER_WINDOW": "2m", "LUCIUS_BREAKER_COOL_DOWN": "10s", "LUCIUS_BREAKER_FAILURE_PERCENT": "80"}, true},
		{"disabled", map[string]string{"LUCIUS_BREAKER_ENABLED": "false"}, true},
		{"rate above 100", map[string]string{"LUCIUS_BREAKER_FAILURE_PERCENT": "101"}, false},
		{"negative rate", map[string]string{"LUCIUS_BREAKER_FAILURE_PERCENT": "-5"}, false},
		{"cool-down longer than the window", map[string]string{"LUCIUS_BREAKER_COOL_DOWN": "2m"}, false},
		{"negative probes", map[string]string{"LUCIUS_BREAKER_PROBES": "-1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := env.FromMap(tt.env)
			p := PolicyFromEnv(e)
			if err := e.Err(); err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); (err == nil) != tt.valid {
				t.Fatalf("Validate() = %v, want valid %v", err, tt.valid)
			}
		})
	}
	if p := PolicyFromEnv(env.FromMap(map[string]string{"LUCIUS_BREAKER_ENABLED": "false"})); !p.Disabled {
		t.Fatal("LUCIUS_BREAKER_ENABLED=false does not disable")
	}
}
