package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
)

type workflowHandler = workflow.HandlerInfo

// runbookExecutor carries out seed 003's "expected orchestrator behavior":
// init steps, phases index by index across members, polling, rollbacks,
// member catch-up and removal. Each unit of work runs as a Lucius job (the
// engine, attempts, leases and callbacks of every job); the engine reports
// back with job-update messages on the same subscription. Orchestrators
// compete for the subscription; a handler locks its batch, so work on one
// batch is serialized, and every handler is safe to run twice.
type runbookExecutor struct {
	store     *ledger.Store
	runbooks  *runbook.Store
	engine    *engine.Engine
	workflows *registry.Registry
	receiver  bus.Receiver
	now       func() time.Time
	log       *slog.Logger

	handled    metric.Int64Counter
	dispatched metric.Int64Counter

	mu   sync.Mutex
	defs map[string]*runbook.Runbook // name@version; versions are immutable
}

func newRunbookExecutor(store *ledger.Store, runbooks *runbook.Store, eng *engine.Engine, workflows *registry.Registry, r bus.Receiver,
	now func() time.Time, log *slog.Logger) (*runbookExecutor, error) {
	meter := otel.Meter("lucius/orchestrator")
	handled, err := meter.Int64Counter("lucius_runbook_events_total",
		metric.WithDescription("orchestrator-events messages handled by the runbook executor, by type and outcome."))
	if err != nil {
		return nil, err
	}
	dispatched, err := meter.Int64Counter("lucius_runbook_dispatches_total",
		metric.WithDescription("Runbook step and init executions submitted as jobs."))
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &runbookExecutor{store: store, runbooks: runbooks, engine: eng, workflows: workflows,
		receiver: r, now: now, log: log, handled: handled, dispatched: dispatched, defs: map[string]*runbook.Runbook{}}, nil
}

// definition returns a runbook version, parsed once.
func (x *runbookExecutor) definition(ctx context.Context, name string, version int) (*runbook.Runbook, error) {
	key := fmt.Sprintf("%s@%d", name, version)
	x.mu.Lock()
	rb, ok := x.defs[key]
	x.mu.Unlock()
	if ok {
		return rb, nil
	}
	stored, err := x.runbooks.Get(ctx, name, version)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.defs[key] = stored.Runbook
	x.mu.Unlock()
	return stored.Runbook, nil
}

// run receives until ctx ends, handling one event after another.
func (x *runbookExecutor) run(ctx context.Context) {
	bus.Consume(ctx, x.receiver, bus.ConsumeOptions{Batch: 8,
		OnError: func(ctx context.Context, err error, _ time.Duration) {
			x.log.WarnContext(ctx, "receive orchestrator-events", telemetry.Err(err))
		}}, x.receive)
}

func (x *runbookExecutor) receive(ctx context.Context, m *bus.Received) {
	ctx = otel.GetTextMapPropagator().Extract(ctx, bus.PropertiesCarrier(m.Properties))
	typ := m.Properties[engine.PropMessageType]
	ctx, span := otel.Tracer("lucius/orchestrator").Start(ctx, "orchestrator-events "+typ,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attribute.String("messaging.message.id", m.ID)))
	defer span.End()
	err := x.handle(ctx, typ, m.Body)
	outcome := "handled"
	switch {
	case errors.Is(err, errPoison):
		outcome = "poison"
		x.log.ErrorContext(ctx, "unreadable orchestrator-events message; dead-lettering", "message_id", m.ID, "type", typ, telemetry.Err(err))
		if err := x.receiver.DeadLetter(ctx, m, "PoisonMessage", err.Error()); err != nil {
			x.log.WarnContext(ctx, "dead-letter", telemetry.Err(err))
		}
	case err != nil:
		outcome = "error"
		x.log.WarnContext(ctx, "orchestrator-events message failed; it will be redelivered", "message_id", m.ID, "type", typ,
			"delivery_count", m.DeliveryCount, telemetry.Err(err))
		if err := x.receiver.Abandon(ctx, m); err != nil && !errors.Is(err, bus.ErrLockLost) {
			x.log.WarnContext(ctx, "abandon", telemetry.Err(err))
		}
	default:
		if err := x.receiver.Complete(ctx, m); err != nil {
			x.log.WarnContext(ctx, "complete orchestrator-events message", telemetry.Err(err))
		}
	}
	x.handled.Add(ctx, 1, metric.WithAttributes(attribute.String("type", typ), attribute.String("outcome", outcome)))
}

var errPoison = errors.New("poison message")

// handle applies one message: a scheduler event or a job update.
func (x *runbookExecutor) handle(ctx context.Context, typ string, body []byte) error {
	if typ == engine.MessageTypeJobUpdate {
		var u engine.JobUpdate
		if err := json.Unmarshal(body, &u); err != nil || u.JobID == "" {
			return fmt.Errorf("%w: job-update: %v", errPoison, err)
		}
		return x.jobUpdate(ctx, u)
	}
	var ev runbook.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.BatchID == 0 {
		return fmt.Errorf("%w: %s: %v", errPoison, typ, err)
	}
	switch typ {
	case runbook.EventBatchInit:
		return x.inBatch(ctx, ev.BatchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
			return x.advanceInit(ctx, tx, b, fx, now)
		})
	case runbook.EventPhaseDue:
		return x.inBatch(ctx, ev.BatchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
			return x.advancePhase(ctx, tx, b, ev.PhaseExecutionID, fx, now)
		})
	case runbook.EventMemberAdded:
		return x.inBatch(ctx, ev.BatchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
			if !x.rows(tx).MemberActive(ctx, ev.BatchMemberID) || b.Status == runbook.BatchCompleted || b.Status == runbook.BatchFailed {
				return nil // removed again meanwhile, or the batch is over
			}
			return x.catchUp(ctx, tx, b, ev.BatchMemberID, fx, now)
		})
	case runbook.EventMemberRemoved:
		return x.inBatch(ctx, ev.BatchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
			if x.rows(tx).MemberActive(ctx, ev.BatchMemberID) {
				return nil // added back meanwhile
			}
			return x.removeMember(ctx, tx, b, ev.BatchMemberID, fx, now)
		})
	case runbook.EventPollCheck:
		table, id := runbook.TableSteps, ev.StepExecutionID
		if ev.InitExecutionID != 0 {
			table, id = runbook.TableInit, ev.InitExecutionID
		}
		return x.inBatch(ctx, ev.BatchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
			return x.pollCheck(ctx, tx, b, table, id, ev.PollCount, fx, now)
		})
	}
	return fmt.Errorf("%w: unknown message type %q", errPoison, typ)
}

// rows are the runbook executions as seen by tx.
func (x *runbookExecutor) rows(tx *ledger.Tx) *runbook.Executions { return x.runbooks.InLedgerTx(tx) }

// inBatch runs fn in one ledger transaction under the batch's lock, then the
// engine calls fn asked for.
func (x *runbookExecutor) inBatch(ctx context.Context, batchID int64, fn func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error) error {
	var fx effects
	err := x.store.InTx(ctx, func(tx *ledger.Tx) error {
		fx = effects{}
		b, err := x.rows(tx).LockBatch(ctx, batchID)
		if errors.Is(err, runbook.ErrNotFound) {
			x.log.WarnContext(ctx, "runbook event for an unknown batch; dropped", "batch_id", batchID)
			return nil
		}
		if err != nil {
			return err
		}
		return fn(tx, b, &fx, x.now())
	})
	if err != nil {
		return err
	}
	x.apply(ctx, fx)
	return nil
}

// apply performs what a committed handler asked of the engine. A failure is
// logged; the protocols converge anyway (a job still running ends and its
// update is ignored; a poll not started is asked for again by the next
// poll-check).
func (x *runbookExecutor) apply(ctx context.Context, fx effects) {
	for _, id := range fx.cancel {
		if _, err := x.engine.Cancel(ctx, id, "runbook: the step was cancelled"); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			x.log.WarnContext(ctx, "cancel a runbook step's job", telemetry.JobID(id), telemetry.Err(err))
		}
	}
	for _, id := range fx.repoll {
		if _, err := x.engine.Repoll(ctx, id, "run"); err != nil {
			x.log.WarnContext(ctx, "poll a runbook step again", telemetry.JobID(id), telemetry.Err(err))
		}
	}
}

// jobUpdate records what a step's job reported and moves its protocol on.
func (x *runbookExecutor) jobUpdate(ctx context.Context, u engine.JobUpdate) error {
	var batchID int64
	err := x.store.InTx(ctx, func(tx *ledger.Tx) error {
		r, err := x.rows(tx).ByJob(ctx, u.JobID)
		if err == nil {
			batchID = r.BatchID
		}
		return err
	})
	if errors.Is(err, runbook.ErrNotFound) {
		return nil // not a runbook job (or its rows are gone)
	}
	if err != nil {
		return err
	}
	return x.inBatch(ctx, batchID, func(tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
		r, err := x.rows(tx).ByJob(ctx, u.JobID)
		if err != nil || r.Terminal() {
			return err // already settled (a repeated update, or cancelled by us)
		}
		log := x.log.With("batch_id", b.ID, "step", r.StepName, "execution_id", r.ID, telemetry.JobID(u.JobID))
		switch {
		case u.StepStatus == string(ledger.StepPolling) && !ledger.JobStatus(u.Status).Terminal():
			if !r.IsPoll {
				fx.cancel = append(fx.cancel, u.JobID)
				if err := x.rows(tx).Finish(ctx, r, runbook.StepFailed, u.Output, "the worker answered POLLING for a step that is not a poll step", now); err != nil {
					return err
				}
				break
			}
			log.DebugContext(ctx, "runbook step polling")
			return x.rows(tx).Polling(ctx, r, u.Output, now)
		case u.Status == string(ledger.JobSucceeded):
			if err := x.rows(tx).Finish(ctx, r, runbook.StepSucceeded, u.Output, "", now); err != nil {
				return err
			}
		case ledger.JobStatus(u.Status).Terminal():
			log.InfoContext(ctx, "runbook step failed", "job_status", u.Status, "reason", u.Reason)
			if err := x.rows(tx).Finish(ctx, r, runbook.StepFailed, u.Output, firstNonEmpty(u.Reason, "job "+u.Status), now); err != nil {
				return err
			}
		default:
			return nil
		}
		return x.afterExec(ctx, tx, b, r, fx, now)
	})
}

// pollCheck is the polling protocol: a step polled past its timeout ends
// poll_timeout (a failure: rollback if it has one); otherwise it is
// dispatched again.
func (x *runbookExecutor) pollCheck(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, table string, id int64, pollCount int,
	fx *effects, now time.Time) error {
	r, err := x.rows(tx).ByID(ctx, table, id)
	if errors.Is(err, runbook.ErrNotFound) {
		return nil
	}
	if err != nil || r.Status != runbook.StepPolling {
		return err // answered meanwhile
	}
	if !r.PollStarted.IsZero() && now.After(r.PollStarted.Add(time.Duration(r.PollTimeout)*time.Second)) {
		x.log.WarnContext(ctx, "runbook step poll timeout", "batch_id", b.ID, "step", r.StepName, "poll_count", r.PollCount)
		fx.cancel = append(fx.cancel, r.JobID)
		if err := x.rows(tx).Finish(ctx, r, runbook.StepPollTimeout, nil,
			fmt.Sprintf("still in progress after the poll timeout of %ds", r.PollTimeout), now); err != nil {
			return err
		}
		return x.afterExec(ctx, tx, b, r, fx, now)
	}
	if err := x.rows(tx).Polled(ctx, r, pollCount, now); err != nil {
		return err
	}
	fx.repoll = append(fx.repoll, r.JobID)
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
