package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/lucius-platform/lucius/core/breaker"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// withBreakers gives the fixture an engine whose dispatches respect the
// ledger's circuit breakers, and a monitor deciding them under policy.
func (f *fixture) withBreakers(policy breaker.Policy) (*breaker.Cache, *breaker.Monitor) {
	f.t.Helper()
	cache := breaker.NewCache(f.store, policy, slog.New(slog.DiscardHandler))
	eng, err := engine.New(f.store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: f.reg,
		Callbacks:     engine.Callbacks{GRPCTarget: "dns:///orchestrator:9091"},
		WorkspaceRoot: "file:///tmp/ws", Now: f.clock.Now, Breakers: cache})
	if err != nil {
		f.t.Fatal(err)
	}
	f.eng = eng
	monitor, err := breaker.NewMonitor(f.store, policy, func(ctx context.Context, h ledger.HeldStep) error {
		_, err := eng.ReleaseHold(ctx, h)
		return err
	}, noop.NewMeterProvider().Meter("test"), slog.New(slog.DiscardHandler), func(ctx context.Context) {
		if err := cache.Refresh(ctx); err != nil {
			f.t.Error(err)
		}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return cache, monitor
}

func (f *fixture) breaker(service string) ledger.Breaker {
	f.t.Helper()
	b, _, err := f.store.Breaker(f.ctx, service, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) round(m *breaker.Monitor) {
	f.t.Helper()
	if err := m.Round(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) directives(jobID string) int {
	n := 0
	for _, m := range f.outbox(jobID) {
		if m.Kind == ledger.KindDirective {
			n++
		}
	}
	return n
}

// A service whose attempts keep failing RETRYABLE gets its breaker opened:
// its steps wait READY (CIRCUIT_OPEN) with no directive out, a cancel
// cancels them at once, and nothing fails for it; after the cool-down the
// breaker probes, the probes' success closes it and the held steps go out,
// highest priority first.
func TestBreakerOpensHoldsProbesAndCloses(t *testing.T) {
	t.Parallel()
	f := setup(t)
	policy := breaker.Policy{MinAttempts: 3, FailurePercent: 60, Window: time.Minute, CoolDown: 300 * time.Millisecond, Probes: 1}
	cache, monitor := f.withBreakers(policy)

	// Three attempts of ocr fail retryably: 3 of 3 ≥ 60%.
	var failing []string
	for range 3 {
		q := f.accept("OCR")
		f.create(q)
		s := f.current(q.JobId)
		f.result(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, true)
		failing = append(failing, q.JobId)
	}
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerOpen || b.Attempts != 3 || b.FailureRate != 1 {
		t.Fatalf("after 3 retryable failures: %+v", b)
	}
	if !cache.Holding("ocr") || cache.Holding("embedding") {
		t.Fatal("the cache does not hold ocr alone")
	}

	// New work for ocr is held, not dispatched; a cancel closes it at once.
	held := f.create(f.accept("OCR"))
	cancelled := f.create(f.accept("OCR"))
	for _, id := range []string{held.JobID, cancelled.JobID} {
		s := f.steps(id)[0]
		if s.Status != ledger.StepReady || s.AttemptNo != 0 || f.directives(id) != 0 {
			t.Fatalf("job %s under an open breaker: step %s attempt %d, %d directives", id, s.Status, s.AttemptNo, f.directives(id))
		}
		if !hasEvent(f.events(id), ledger.EventStepStatusChanged, engine.ReasonCircuitOpen) {
			t.Fatalf("job %s: no CIRCUIT_OPEN event", id)
		}
	}
	if j, err := f.eng.Cancel(f.ctx, cancelled.JobID, "test"); err != nil || j.Status != ledger.JobCancelled {
		t.Fatalf("cancel a held job: %v %v", j.Status, err)
	}
	// The failing jobs' retries (after their backoff) are held too.
	for _, id := range failing {
		if s := f.steps(id)[0]; s.Status != ledger.StepFailedRetry && s.Status != ledger.StepReady {
			t.Fatalf("failing job %s: step %s", id, s.Status)
		}
	}
	if b := f.breaker("ocr"); b.Held != 1 {
		t.Fatalf("%d steps held, want 1 (the cancelled one is forgotten)", b.Held)
	}

	// Cool-down over: half-open, one probe released.
	time.Sleep(policy.CoolDown)
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerHalfOpen || b.Probes != 1 || b.Held != 0 {
		t.Fatalf("after the cool-down: %+v", b)
	}
	probe := f.current(held.JobID)
	if probe.Status != ledger.StepDispatching || probe.AttemptNo != 1 || f.directives(held.JobID) != 1 {
		t.Fatalf("the probe: %s attempt %d", probe.Status, probe.AttemptNo)
	}
	// More work meanwhile waits for the verdict.
	later := f.create(f.accept("OCR"))
	if s := f.steps(later.JobID)[0]; s.Status != ledger.StepReady {
		t.Fatalf("work arriving while half-open: %s", s.Status)
	}
	f.ack(probe)
	f.succeed(probe)
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerClosed || b.Held != 0 {
		t.Fatalf("after a good probe: %+v", b)
	}
	if cache.Holding("ocr") {
		t.Fatal("the cache still holds ocr")
	}
	if s := f.current(later.JobID); s.Status != ledger.StepDispatching || s.AttemptNo != 1 {
		t.Fatalf("held work after the close: %s attempt %d", s.Status, s.AttemptNo)
	}
	_, transitions, err := f.store.Breaker(f.ctx, "ocr", 10)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for i := len(transitions) - 1; i >= 0; i-- {
		path = append(path, string(transitions[i].To))
	}
	if got := strings.Join(path, ","); got != "OPEN,HALF_OPEN,CLOSED" {
		t.Fatalf("transitions %s", got)
	}
	for _, id := range append(failing, held.JobID, later.JobID) {
		if j := f.job(id); j.Status == ledger.JobFailedFinal {
			t.Fatalf("job %s failed: %s", id, j.Reason)
		}
	}
}

// A failed probe opens the breaker again; an operator's reset closes it and
// the held steps go out, and failures from before the reset do not reopen it.
func TestBreakerReopensOnAFailedProbeAndResets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	policy := breaker.Policy{MinAttempts: 2, FailurePercent: 50, Window: time.Minute, CoolDown: 200 * time.Millisecond, Probes: 1}
	cache, monitor := f.withBreakers(policy)
	for range 2 {
		q := f.accept("OCR")
		f.create(q)
		s := f.current(q.JobId)
		f.result(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, false)
	}
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerClosed {
		t.Fatalf("non-retryable failures opened the breaker: %+v", b)
	}
	for range 2 {
		q := f.accept("OCR")
		f.create(q)
		s := f.current(q.JobId)
		f.result(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, true)
	}
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerOpen {
		t.Fatalf("2 retryable of 4: %+v", b)
	}
	waiting := f.create(f.accept("OCR"))
	time.Sleep(policy.CoolDown)
	f.round(monitor)
	probe := f.current(waiting.JobID)
	f.result(probe.JobID, probe.StepID, probe.AttemptNo, probe.LeaseID, engine.ResultFailed, true)
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerOpen || b.Held != 1 {
		t.Fatalf("after a failed probe: %+v", b)
	}
	if s := f.steps(waiting.JobID)[0]; s.Status != ledger.StepReady || s.AttemptNo != 1 {
		t.Fatalf("the failed probe's retry: %s attempt %d", s.Status, s.AttemptNo)
	}
	if _, err := f.store.ChangeBreaker(f.ctx, ledger.BreakerChange{Service: "ocr", To: ledger.BreakerClosed, Reason: "test", Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	f.round(monitor)
	if b := f.breaker("ocr"); b.State != ledger.BreakerClosed || b.Held != 0 || b.UpdatedBy != "op" {
		t.Fatalf("after a reset: %+v", b)
	}
	if err := cache.Refresh(f.ctx); err != nil { // every process does, each interval
		t.Fatal(err)
	}
	if cache.Holding("ocr") {
		t.Fatal("the cache still holds ocr after the reset")
	}
	if s := f.current(waiting.JobID); s.Status != ledger.StepDispatching || s.AttemptNo != 2 {
		t.Fatalf("held retry after the reset: %s attempt %d", s.Status, s.AttemptNo)
	}
}

// An operator's pause holds a job's next step (reason PAUSED) before its
// breaker is even asked; once resumed, a step whose breaker is open waits on
// for the breaker, and goes out when it closes.
func TestPauseHoldsBeforeTheBreakerAndResumeHandsOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := f.ctx
	live, err := config.Watch(ctx, f.store.Pool(), time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Close)
	cache := breaker.NewCache(f.store, breaker.Policy{}, slog.New(slog.DiscardHandler))
	eng, err := engine.New(f.store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: f.reg,
		Callbacks: engine.Callbacks{GRPCTarget: "dns:///orchestrator:9091"}, WorkspaceRoot: "file:///tmp/ws", Now: f.clock.Now,
		Breakers: cache, Pauses: live})
	if err != nil {
		t.Fatal(err)
	}
	f.eng = eng
	if _, err := live.Store().Pause(ctx, config.Pause{Scope: config.PauseTenant, Key: "acme", Reason: "incident", PausedBy: "op"}); err != nil {
		t.Fatal(err)
	}
	if err := live.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ChangeBreaker(ctx, ledger.BreakerChange{Service: "ocr", From: ledger.BreakerClosed, To: ledger.BreakerOpen,
		Reason: "test", Principal: "test", RetryAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	job := f.create(f.accept("OCR")) // tenant Acme, normalized acme
	s := f.steps(job.JobID)[0]
	if s.Status != ledger.StepReady || !strings.HasPrefix(s.Reason, engine.ReasonPaused) || !strings.Contains(s.Reason, "incident") {
		t.Fatalf("a paused job's step: %s %q", s.Status, s.Reason)
	}
	held, err := f.store.HeldSteps(ctx, ledger.HoldPause, "", 10)
	if err != nil || len(held) != 1 || held[0].Tenant != "acme" || held[0].Workflow != "OCR" {
		t.Fatalf("pause holds: %+v %v", held, err)
	}
	if err := live.Store().Resume(ctx, config.PauseTenant, "acme", "op"); err != nil {
		t.Fatal(err)
	}
	if err := live.Reload(ctx); err != nil { // as every process does when it hears of the change
		t.Fatal(err)
	}
	if _, err := f.eng.ReleaseHold(ctx, held[0]); err != nil {
		t.Fatal(err)
	}
	s = f.steps(job.JobID)[0]
	if s.Status != ledger.StepReady || !strings.HasPrefix(s.Reason, engine.ReasonCircuitOpen) || f.directives(job.JobID) != 0 {
		t.Fatalf("resumed under an open breaker: %s %q, %d directives", s.Status, s.Reason, f.directives(job.JobID))
	}
	circuit, err := f.store.HeldSteps(ctx, ledger.HoldCircuit, "ocr", 10)
	if err != nil || len(circuit) != 1 {
		t.Fatalf("circuit holds: %+v %v", circuit, err)
	}
	if _, err := f.eng.ReleaseHold(ctx, circuit[0]); err != nil {
		t.Fatal(err)
	}
	if s := f.current(job.JobID); s.Status != ledger.StepDispatching || s.AttemptNo != 1 || f.directives(job.JobID) != 1 {
		t.Fatalf("released by its breaker: %s attempt %d", s.Status, s.AttemptNo)
	}
}
