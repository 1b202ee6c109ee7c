package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
)

// jobConsumer competes for orchestrator-jobs messages and turns each into a
// job owned by this instance. The message is completed only after the job's
// transaction committed; a crash in between redelivers it, and CreateJob finds
// the job and changes nothing.
type jobConsumer struct {
	receiver    bus.Receiver
	engine      *engine.Engine
	owner       *ownership
	concurrency int
	log         *slog.Logger
	claimed     metric.Int64Counter
}

func newJobConsumer(r bus.Receiver, eng *engine.Engine, owner *ownership, concurrency int, log *slog.Logger) (*jobConsumer, error) {
	claimed, err := otel.Meter("lucius/orchestrator").Int64Counter("lucius_orchestrator_jobs_claimed_total",
		metric.WithDescription("orchestrator-jobs messages handled, by outcome (created, existing, poison, error)."))
	if err != nil {
		return nil, err
	}
	return &jobConsumer{receiver: r, engine: eng, owner: owner, concurrency: concurrency, log: log, claimed: claimed}, nil
}

// run receives until ctx ends, creating up to concurrency jobs at once.
func (c *jobConsumer) run(ctx context.Context) {
	bus.Consume(ctx, c.receiver, bus.ConsumeOptions{Batch: c.concurrency, Concurrency: c.concurrency,
		OnError: func(ctx context.Context, err error, _ time.Duration) {
			c.log.WarnContext(ctx, "receive orchestrator-jobs", telemetry.Err(err))
		}}, c.handle)
}

func (c *jobConsumer) handle(ctx context.Context, m *bus.Received) {
	ctx = otel.GetTextMapPropagator().Extract(ctx, bus.PropertiesCarrier(m.Properties))
	ctx, span := otel.Tracer("lucius/orchestrator").Start(ctx, "orchestrator-jobs receive",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attribute.String("messaging.message.id", m.ID)))
	defer span.End()
	q := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(m.Body, q); err != nil || q.GetJobId() == "" {
		c.count(ctx, "poison")
		c.log.ErrorContext(ctx, "unreadable orchestrator-jobs message; dead-lettering", "message_id", m.ID, telemetry.Err(err))
		if err := c.receiver.DeadLetter(ctx, m, "PoisonMessage", "body is not a lucius.v1.QueuedJob"); err != nil {
			c.log.WarnContext(ctx, "dead-letter", telemetry.Err(err))
		}
		return
	}
	log := c.log.With(telemetry.JobID(q.GetJobId()), telemetry.TenantID(q.GetCommand().GetTenantId()))
	created, err := c.engine.CreateJob(ctx, q, c.owner.owner)
	if err != nil {
		c.count(ctx, "error")
		log.ErrorContext(ctx, "create job; abandoning message for redelivery", "delivery_count", m.DeliveryCount, telemetry.Err(err))
		if err := c.receiver.Abandon(ctx, m); err != nil && !errors.Is(err, bus.ErrLockLost) {
			log.WarnContext(ctx, "abandon", telemetry.Err(err))
		}
		return
	}
	outcome := "existing"
	if created.New {
		outcome = "created"
		c.owner.hold(created.Job.JobID, created.Job.OwnerEpoch)
		log.InfoContext(ctx, "job created", "status", created.Job.Status, telemetry.KeyOwnerID, c.owner.owner)
	} else {
		log.InfoContext(ctx, "job already exists; redelivered message completed")
	}
	c.count(ctx, outcome)
	if err := c.receiver.Complete(ctx, m); err != nil {
		// The job is committed; a redelivery will find it and change nothing.
		log.WarnContext(ctx, "complete orchestrator-jobs message", telemetry.Err(err))
	}
}

func (c *jobConsumer) count(ctx context.Context, outcome string) {
	c.claimed.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}
