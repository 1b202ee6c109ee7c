package engine_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// metricCheck is what one series of a metric should have gained.
type metricCheck struct {
	name  string
	attrs []attribute.KeyValue
	// histogram: count is the observations and minSum a lower bound of
	// their sum; otherwise count is the counter's increase.
	histogram bool
	count     uint64
	minSum    float64
	before    struct {
		count uint64
		sum   float64
	}
}

func (c *metricCheck) read(t *testing.T) (uint64, float64) {
	t.Helper()
	if c.histogram {
		return metrics.Histogram(t, c.name, c.attrs...)
	}
	return uint64(metrics.Value(t, c.name, c.attrs...)), 0
}

func series(kv ...string) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return attrs
}

// The job and step metrics of seed 004 §12 are recorded once a transition
// commits, in whichever path applies it: callbacks, the ACK sweeper's
// retries, and the package's Cancel as the gateway calls it. Durations are
// measured on the engine's clock from the submit (jobs) and the attempt's
// dispatch, after any backoff (steps). A duplicate RESULT records nothing.
func TestJobAndStepMetricsAreRecordedWhenTransitionsCommit(t *testing.T) {
	// Not parallel: it reads the process's metrics, which parallel tests move
	// too; sequential tests run while they wait.
	f := setup(t)
	const (
		succeeded   = engine.ResultSucceeded
		failed      = engine.ResultFailed
		retryable   = true
		backoffOver = time.Minute // longer than OCR's first retry delay
	)
	checks := []*metricCheck{
		{name: engine.MetricJobsCompleted, attrs: series("workflow", "OCR_EMBEDDING_SIS", "status", "SUCCEEDED"), count: 1},
		{name: engine.MetricJobsCompleted, attrs: series("workflow", "OCR", "status", "FAILED_FINAL"), count: 1},
		{name: engine.MetricJobsCompleted, attrs: series("workflow", "OCR", "status", "CANCELLED"), count: 1},
		{name: engine.MetricJobDuration, attrs: series("workflow", "OCR_EMBEDDING_SIS", "status", "SUCCEEDED"), histogram: true,
			count: 1, minSum: (5*time.Second + backoffOver).Seconds()},
		{name: engine.MetricJobDuration, attrs: series("workflow", "OCR", "status", "FAILED_FINAL"), histogram: true,
			count: 1, minSum: (workflow.DefaultMaxAttempts * workflow.DefaultAckTimeout).Seconds()},
		{name: engine.MetricStepQueue, attrs: series("handler", "OCR"), histogram: true, count: 3, minSum: 2},
		{name: engine.MetricStepQueue, attrs: series("handler", "EMBEDDING"), histogram: true, count: 1},
		{name: engine.MetricStepDuration, attrs: series("handler", "OCR", "status", "FAILED_RETRY"), histogram: true, count: 2, minSum: 5},
		{name: engine.MetricStepDuration, attrs: series("handler", "OCR", "status", "SUCCEEDED"), histogram: true, count: 1},
		{name: engine.MetricStepDuration, attrs: series("handler", "SIS", "status", "SUCCEEDED"), histogram: true, count: 1},
		{name: engine.MetricStepRetries, attrs: series("handler", "OCR", "track", engine.TrackExecution), count: 2},
		{name: engine.MetricStepRetries, attrs: series("handler", "OCR", "track", engine.TrackAck), count: workflow.DefaultMaxAttempts - 1},
		{name: ledger.MetricDeadLetters, attrs: series("kind", ledger.DeadLetterStep), count: 1},
	}
	for _, c := range checks {
		c.before.count, c.before.sum = c.read(t)
	}

	// A three-step job whose first step fails once after an ACK, then runs.
	a := f.accept("OCR_EMBEDDING_SIS")
	f.create(a)
	s := f.current(a.JobId)
	f.clock.Advance(2 * time.Second) // dispatch → ACK
	f.ack(s)
	f.clock.Advance(3 * time.Second) // dispatch → RESULT: 5s
	f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, failed, retryable)
	f.clock.Advance(backoffOver)
	for range 3 {
		s = f.current(a.JobId)
		f.ack(s)
		f.succeed(s)
	}
	if got := f.job(a.JobId).Status; got != ledger.JobSucceeded {
		t.Fatalf("job %s is %s, want SUCCEEDED", a.JobId, got)
	}
	if r := f.succeed(s); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		t.Fatalf("repeated RESULT: %+v", r)
	}

	// A job nobody acknowledges: the ACK sweeper retries it, then it fails.
	b := f.accept("OCR")
	f.create(b)
	for range workflow.DefaultMaxAttempts {
		f.clock.Advance(workflow.DefaultAckTimeout + time.Second)
		if r, err := f.eng.ExpireAck(f.ctx, keyOf(f.current(b.JobId))); err != nil || !r.Applied {
			t.Fatalf("expire ack: %+v %v", r, err)
		}
	}
	if got := f.job(b.JobId).Status; got != ledger.JobFailedFinal {
		t.Fatalf("job %s is %s, want FAILED_FINAL", b.JobId, got)
	}

	// A job cancelled by the gateway while its step waits for a retry.
	c := f.accept("OCR")
	f.create(c)
	s = f.current(c.JobId)
	f.ack(s)
	f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, failed, retryable)
	if job, err := engine.Cancel(f.ctx, f.store, c.JobId, "", f.clock.Now); err != nil || job.Status != ledger.JobCancelled {
		t.Fatalf("cancel: %+v %v", job, err)
	}

	for _, c := range checks {
		count, sum := c.read(t)
		count, sum = count-c.before.count, sum-c.before.sum
		if count != c.count || sum < c.minSum {
			set := attribute.NewSet(c.attrs...)
			t.Errorf("%s{%s} gained %d (sum %.3f), want %d (sum at least %.3f)", c.name, set.Encoded(attribute.DefaultEncoder()),
				count, sum, c.count, c.minSum)
		}
	}
}
