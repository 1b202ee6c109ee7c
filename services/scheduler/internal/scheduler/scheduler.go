package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// Log attribute keys of runbook work (with telemetry's err, outcome and message_id).
const (
	keyRunbook          = "runbook"
	keyRunbookVersion   = "runbook_version"
	keyBatchID          = "batch_id"
	keyBatchStart       = "batch_start_time"
	keyPhase            = "phase"
	keyPhaseExecutionID = "phase_execution_id"
	keyMemberKey        = "member_key"
	keyBatchMemberID    = "batch_member_id"
	keyStage            = "stage"
)

// Stages, as logged and as the stage label of lucius_scheduler_errors_total.
const (
	stageList       = "list"       // listing the active versions
	stageLoad       = "load"       // loading one version
	stageTransition = "transition" // moving batches to the active version
	stageDetect     = "detect"     // new batches
	stageMembers    = "members"    // members added and removed
	stagePhases     = "phases"     // due phases
	stageRender     = "render"     // a member's params that do not render (its steps are failed)
	stagePolls      = "polls"      // poll checks
	stageDuplicate  = "duplicate"  // an event already in the outbox, left out
)

// Scheduler decides, tick by tick, which runbook facts are due and emits
// their events (see the package documentation). Any number may run against
// one database: each fact is claimed by exactly one.
type Scheduler struct {
	store    *ledger.Store
	runbooks *runbook.Store
	now      func() time.Time
	batch    int
	timeout  time.Duration
	log      *slog.Logger

	events   metric.Int64Counter
	errors   metric.Int64Counter
	duration metric.Float64Histogram
	// duplicates counts events left out because their id was in the outbox
	// (tests assert it stays zero: the row changes alone must decide).
	duplicates atomic.Int64
}

// New returns a scheduler over the ledger (whose transactions carry the
// outbox) and the runbook store, with cfg's Batch, Now, QueryTimeout and Logger.
func New(store *ledger.Store, runbooks *runbook.Store, cfg Config) (*Scheduler, error) {
	cfg.defaults()
	if err := cfg.validateScheduling(); err != nil {
		return nil, err
	}
	meter := otel.Meter("lucius/scheduler")
	events, err := meter.Int64Counter("lucius_scheduler_events_total",
		metric.WithDescription("Runbook events emitted to orchestrator-events, by type."))
	if err != nil {
		return nil, err
	}
	errs, err := meter.Int64Counter("lucius_scheduler_errors_total",
		metric.WithDescription("Scheduler failures, by stage (list, load, transition, detect, members, phases, render, polls, duplicate)."))
	if err != nil {
		return nil, err
	}
	duration, err := meter.Float64Histogram("lucius_scheduler_tick_seconds",
		metric.WithDescription("Duration of a scheduler tick."), metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	return &Scheduler{store: store, runbooks: runbooks, now: cfg.Now, batch: cfg.Batch, timeout: cfg.QueryTimeout,
		log: cfg.Logger, events: events, errors: errs, duration: duration}, nil
}

// Tick runs one round at the clock's current time: for every active runbook
// version, version transitions, batch detection, member changes and due
// phases; then poll checks. A failure is logged and counted and the round
// goes on with the next batch or runbook; the joined failures are returned.
func (s *Scheduler) Tick(ctx context.Context) error {
	started := time.Now()
	defer func() { s.duration.Record(ctx, time.Since(started).Seconds()) }()
	// PostgreSQL keeps microseconds: every time written, and every message id
	// derived from one, is exactly what the rows hold.
	now := s.now().UTC().Truncate(time.Microsecond)
	ids, err := s.runbooks.ActiveIDs(ctx)
	if err != nil {
		s.failed(ctx, stageList, err)
		return err
	}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, s.version(ctx, now, id))
	}
	errs = append(errs, s.polls(ctx, now))
	return errors.Join(errs...)
}

// version runs the per-version stages of one active runbook version. Each
// stage goes on when another failed: a broken member table does not stop
// polls or transitions.
func (s *Scheduler) version(ctx context.Context, now time.Time, id int64) (err error) {
	defer func() {
		// A bug tripped by one runbook must not stop every other one.
		if r := recover(); r != nil {
			err = fmt.Errorf("runbook %d: panic: %v", id, r)
			s.failed(ctx, stageLoad, err, slog.Int64("runbook_id", id))
		}
	}()
	sr, err := s.runbooks.GetByID(ctx, id)
	if err != nil {
		s.failed(ctx, stageLoad, err, slog.Int64("runbook_id", id))
		return err
	}
	return errors.Join(
		s.transitions(ctx, now, sr),
		s.detect(ctx, now, sr),
		s.members(ctx, now, sr),
		s.phases(ctx, now, sr),
	)
}

// inTx runs fn in a ledger transaction with its own timeout; the events fn
// adds to its emitter are enqueued in the same transaction, and counted and
// its notes logged once it committed. Each runs in a span of its own
// ("scheduler <op>", one per batch and stage: the scheduler acts on time, not
// on a message), whose context the emitted events carry to the orchestrator.
func (s *Scheduler) inTx(ctx context.Context, op string, fn func(ctx context.Context, q *runbook.Schedule, em *emitter) error) (err error) {
	ctx, span := otel.Tracer("lucius/scheduler").Start(ctx, "scheduler "+op)
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var em *emitter
	err = s.store.InTx(tctx, func(tx *ledger.Tx) error {
		em = &emitter{} // fresh on a retried transaction
		if err := fn(tctx, s.runbooks.ScheduleInLedgerTx(tx), em); err != nil {
			return err
		}
		return em.enqueue(tctx, tx)
	})
	if err != nil {
		return err
	}
	for _, o := range em.out {
		s.events.Add(ctx, 1, metric.WithAttributes(attribute.String("type", o.typ)))
	}
	for _, id := range em.dropped {
		s.duplicates.Add(1)
		s.errors.Add(ctx, 1, metric.WithAttributes(attribute.String(keyStage, stageDuplicate)))
		s.log.WarnContext(ctx, "event already in the outbox, not emitted again", slog.String(telemetry.KeyMessageID, id))
	}
	for _, n := range em.notes {
		s.log.LogAttrs(ctx, n.level, n.msg, n.attrs...)
		if n.failure != "" {
			s.errors.Add(ctx, 1, metric.WithAttributes(attribute.String(keyStage, n.failure)))
		}
	}
	return nil
}

// failed counts and logs a failure of a stage.
func (s *Scheduler) failed(ctx context.Context, stage string, err error, attrs ...slog.Attr) {
	if ctx.Err() != nil {
		return // shutting down
	}
	s.errors.Add(ctx, 1, metric.WithAttributes(attribute.String(keyStage, stage)))
	s.log.LogAttrs(ctx, slog.LevelWarn, "scheduler "+stage+" failed",
		append([]slog.Attr{slog.String(keyStage, stage), telemetry.Err(err)}, attrs...)...)
}

// lockActiveVersion holds the version active until the transaction ends; false:
// it is not active any more (a newer version took over since the tick began).
func lockActiveVersion(ctx context.Context, q *runbook.Schedule, id int64) (bool, error) {
	active, err := q.LockActiveVersion(ctx, id)
	if err != nil {
		return false, fmt.Errorf("lock runbook version %d: %w", id, err)
	}
	return active, nil
}

// dueAt is when a phase of a batch is due, by seed 003's convention: the
// offset counts minutes BEFORE the batch start (its example: offsetMinutes
// 7200 on a batch starting 2025-03-15T00:00:00Z is due 2025-03-10T00:00:00Z);
// a negative offset falls after the start.
func dueAt(start time.Time, offsetMinutes int) time.Time {
	return start.Add(-time.Duration(offsetMinutes) * time.Minute)
}

// runbookAttrs are the log attributes naming a version.
func runbookAttrs(sr *runbook.StoredRunbook) []slog.Attr {
	return []slog.Attr{slog.String(keyRunbook, sr.Runbook.Name), slog.Int(keyRunbookVersion, sr.Runbook.Version)}
}

func batchAttrs(sr *runbook.StoredRunbook, batchID int64, more ...slog.Attr) []slog.Attr {
	return append(append(runbookAttrs(sr), slog.Int64(keyBatchID, batchID)), more...)
}
