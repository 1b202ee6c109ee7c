package engine

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Metrics of jobs and steps (seed 004 §12). The engine records them in the
// process that applies the transition: the orchestrator (job creation,
// callbacks), the reconciler (its sweepers' timeouts and SLAs) and the
// gateway (a cancellation with nothing running), so a dashboard sums them
// over processes. Each is recorded once the transition's transaction has
// committed (ledger.Tx.AfterCommit): a transition rolled back is not
// counted, and one InTx tried again is counted once. Their labels are
// bounded: workflow ids by the registry, handlers by the workflows' nodes,
// statuses and tracks by the constants below.
const (
	// MetricJobsCompleted counts jobs that reached a terminal status, by
	// workflow and status (SUCCEEDED, FAILED_FINAL, CANCELLED).
	MetricJobsCompleted = "lucius_jobs_completed_total"
	// MetricJobDuration is the time from a job's submit (its request's
	// acceptance) to its terminal status, by workflow and status.
	MetricJobDuration = "lucius_job_duration_seconds"
	// MetricStepDuration is the time from an attempt's dispatch to its
	// RESULT, by handler and the attempt's outcome (SUCCEEDED, FAILED_RETRY,
	// FAILED_FINAL, POLLING).
	MetricStepDuration = "lucius_step_duration_seconds"
	// MetricStepQueue is the time from an attempt's dispatch to its ACK (or
	// the first callback, which implies it), by handler.
	MetricStepQueue = "lucius_step_queue_seconds"
	// MetricStepRetries counts the attempts started again after a failure,
	// by handler and track (TrackAck, TrackExecution).
	MetricStepRetries = "lucius_step_retries_total"
)

// Retry tracks: the attribute track of MetricStepRetries.
const (
	// TrackAck: nobody acknowledged the attempt in time (ACK_TIMEOUT).
	TrackAck = "ack"
	// TrackExecution: the attempt was acknowledged, then failed retryably
	// (a RESULT, or its lease expired).
	TrackExecution = "execution"
)

type instruments struct {
	jobsCompleted metric.Int64Counter
	jobDuration   metric.Float64Histogram
	stepDuration  metric.Float64Histogram
	stepQueue     metric.Float64Histogram
	stepRetries   metric.Int64Counter
}

// metrics are on the global meter provider: transitions are applied through
// package functions too (Cancel, in the gateway), not only by an Engine.
var metrics = newInstruments(otel.Meter("lucius/engine"))

func newInstruments(meter metric.Meter) *instruments {
	var errs []error
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m := &instruments{
		jobsCompleted: counter(MetricJobsCompleted, "Jobs that reached a terminal status, by workflow and status."),
		jobDuration:   histogram(MetricJobDuration, "Time from a job's submit to its terminal status, by workflow and status."),
		stepDuration:  histogram(MetricStepDuration, "Time from an attempt's dispatch to its RESULT, by handler and the attempt's outcome."),
		stepQueue:     histogram(MetricStepQueue, "Time from an attempt's dispatch to its ACK, by handler."),
		stepRetries:   counter(MetricStepRetries, "Attempts started again after a failure, by handler and track (ack, execution)."),
	}
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return m
}

// jobEnded records, once tx commits, job j reaching terminal status to at now.
func (m *instruments) jobEnded(tx *ledger.Tx, j *ledger.Job, to ledger.JobStatus, now time.Time) {
	attrs := metric.WithAttributes(attribute.String("workflow", j.WorkflowID), attribute.String("status", string(to)))
	took, known := seconds(j.ReceivedAt, now)
	tx.AfterCommit(func() {
		m.jobsCompleted.Add(context.Background(), 1, attrs)
		if known {
			m.jobDuration.Record(context.Background(), took, attrs)
		}
	})
}

// stepAcked records, once tx commits, the pickup of step's attempt at now.
func (m *instruments) stepAcked(tx *ledger.Tx, step *ledger.Step, attempt *ledger.Attempt, now time.Time) {
	took, known := seconds(dispatchedAt(step, attempt), now)
	if !known {
		return
	}
	attrs := metric.WithAttributes(attribute.String("handler", step.Type))
	tx.AfterCommit(func() { m.stepQueue.Record(context.Background(), took, attrs) })
}

// stepResult records, once tx commits, the RESULT that ended step's attempt
// at now, with the outcome settle gave the attempt.
func (m *instruments) stepResult(tx *ledger.Tx, step *ledger.Step, attempt *ledger.Attempt, now time.Time) {
	took, known := seconds(dispatchedAt(step, attempt), now)
	if !known {
		return
	}
	attrs := metric.WithAttributes(attribute.String("handler", step.Type), attribute.String("status", string(attempt.Status)))
	tx.AfterCommit(func() { m.stepDuration.Record(context.Background(), took, attrs) })
}

// stepRetried counts, once tx commits, a new attempt of step after a failure
// on track.
func (m *instruments) stepRetried(tx *ledger.Tx, step *ledger.Step, track string) {
	attrs := metric.WithAttributes(attribute.String("handler", step.Type), attribute.String("track", track))
	tx.AfterCommit(func() { m.stepRetries.Add(context.Background(), 1, attrs) })
}

// dispatchedAt is when an attempt was dispatched: its directive's delivery
// time, at once or after a retry's backoff. newAttempt sets the ACK deadline
// to that time plus the step's ACK timeout; zero when the attempt has none.
func dispatchedAt(step *ledger.Step, attempt *ledger.Attempt) time.Time {
	if attempt.AckDeadline.IsZero() {
		return time.Time{}
	}
	return attempt.AckDeadline.Add(-step.AckTimeout)
}

// seconds is the time from start to end (never negative: the ledger's
// clock and the engine's may differ by a little); known is false without
// a start.
func seconds(start, end time.Time) (took float64, known bool) {
	if start.IsZero() {
		return 0, false
	}
	return max(end.Sub(start).Seconds(), 0), true
}
