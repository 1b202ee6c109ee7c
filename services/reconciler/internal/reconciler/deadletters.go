package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// collector moves bus dead letters (delivery count exceeded, expired, poison)
// into the ledger, where DeadLetterService lists them next to failed steps.
// A message is completed on the bus only after its row committed; the row is
// unique per (entity, message id), so a crash in between collects it once.
// Nothing else needs doing for the work they carried: a dead-lettered
// directive leaves its attempt unacknowledged (the ACK sweeper retries it), a
// dead-lettered job request leaves its request unclaimed (the stranded-request
// sweeper enqueues it again).
type collector struct {
	bus     bus.Bus
	store   *ledger.Store
	sources func(ctx context.Context) ([]bus.Source, error)
	cfg     SweepConfig
	log     *slog.Logger

	mu        sync.Mutex
	receivers map[string]bus.Receiver
	draining  map[string]bool // dead-letter queues being drained
	opening   map[string]bool // dead-letter queues whose receiver is being opened
	slots     chan struct{}   // drainConcurrency
	drains    sync.WaitGroup
}

// pollWait is how long one round waits on each empty dead-letter queue. It
// bounds the claim query too, so it must outlast a slow query on a busy
// database: at 50 ms a loaded machine never collected anything.
const pollWait = 250 * time.Millisecond

// drainConcurrency is how many dead-letter queues are drained at once: a
// drain is mostly waiting (pollWait on an empty queue), but each wait is a
// claim query on the reconciler's pool on the PostgreSQL bus.
const drainConcurrency = 8

// openConcurrency is how many receivers are opened at once, apart from the
// drains: on Service Bus each takes a round trip or two, and a deployment has
// hundreds of dead-letter queues (every service's subscription on every
// directive topic).
const openConcurrency = 16

// round drains every dead-letter queue whose receiver is open once,
// drainConcurrency at a time, skipping those still being drained from an
// earlier round; it waits for a free slot, never for a drain. A queue
// without a receiver yet gets one opened in the background and is drained
// from the next round on, so opening hundreds of receivers (a minute on
// Service Bus) never holds up the queues already open, orchestrator-jobs'
// first among them.
func (c *collector) round(ctx context.Context, m *sweepMetrics) {
	sources, err := c.sources(ctx)
	if err != nil {
		m.failed(ctx, "dead_letters", err)
		return
	}
	for _, src := range sources {
		dlq := src.DeadLetterQueue()
		rcv := c.receiver(ctx, dlq, m)
		if rcv == nil || !c.startDrain(dlq.Path()) {
			continue
		}
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			c.endDrain(dlq.Path())
			return
		}
		c.drains.Add(1)
		go func() {
			defer c.drains.Done()
			defer func() { <-c.slots }()
			defer c.endDrain(dlq.Path())
			c.drain(ctx, dlq, rcv, m)
		}()
	}
}

// startDrain marks path as being drained, unless it is already.
func (c *collector) startDrain(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining[path] {
		return false
	}
	c.draining[path] = true
	return true
}

func (c *collector) endDrain(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.draining, path)
}

// receiver returns src's open receiver, or nil after starting to open one
// in the background (when fewer than openConcurrency are being opened).
func (c *collector) receiver(ctx context.Context, src bus.Source, m *sweepMetrics) bus.Receiver {
	path := src.Path()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.receivers[path]; ok {
		return r
	}
	if c.opening[path] || len(c.opening) >= openConcurrency {
		return nil
	}
	c.opening[path] = true
	c.drains.Add(1)
	go func() {
		defer c.drains.Done()
		r, err := c.bus.NewReceiver(ctx, src)
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.opening, path)
		if err != nil {
			m.failed(ctx, "dead_letters", err, "entity", path)
			return
		}
		c.receivers[path] = r
	}()
	return nil
}

func (c *collector) drain(ctx context.Context, src bus.Source, rcv bus.Receiver, m *sweepMetrics) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, pollWait)
		msgs, err := rcv.Receive(rctx, c.cfg.BatchSize)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				m.failed(ctx, "dead_letters", err, "entity", src.Path())
			}
			return
		}
		for _, msg := range msgs {
			if err := c.collect(ctx, src, rcv, msg); err != nil {
				m.failed(ctx, "dead_letters", err, "entity", src.Path(), "message_id", msg.ID)
				return
			}
			m.action(ctx, "dead_letters", "COLLECTED")
		}
	}
}

func (c *collector) collect(ctx context.Context, src bus.Source, rcv bus.Receiver, msg *bus.Received) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	attemptNo, _ := strconv.Atoi(msg.Properties[engine.PropAttemptNo])
	d := ledger.DeadLetter{Kind: ledger.DeadLetterBus, JobID: msg.Properties[engine.PropJobID],
		StepID: msg.Properties[engine.PropStepID], AttemptNo: attemptNo, Reason: msg.DeadLetterReason,
		Description: msg.DeadLetterDescription, Entity: src.Path(), MessageID: msg.ID, Body: msg.Body, Properties: msg.Properties}
	if d.Reason == "" {
		d.Reason = "DeadLettered"
	}
	collected, err := c.store.CollectDeadLetter(ctx, d)
	if err != nil {
		_ = rcv.Abandon(ctx, msg)
		return err
	}
	if collected {
		c.log.WarnContext(ctx, "bus message dead-lettered", "entity", src.Path(), "message_id", msg.ID,
			telemetry.JobID(d.JobID), telemetry.StepID(d.StepID), telemetry.AttemptNo(d.AttemptNo),
			"reason", d.Reason, "description", d.Description, "delivery_count", msg.DeliveryCount)
	}
	if err := rcv.Complete(ctx, msg); err != nil && !errors.Is(err, bus.ErrLockLost) {
		return err
	}
	return nil
}

// close waits for the drains (they end with the context given to round)
// and closes the receivers.
func (c *collector) close() {
	c.drains.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.receivers {
		_ = r.Close(context.Background())
	}
}

// pendingTimeout bounds the query behind lucius_dead_letters_pending.
const pendingTimeout = 5 * time.Second

// pendingKinds are the kinds lucius_dead_letters_pending reports, 0 when
// there are none: a bounded label set whose series always exist.
var pendingKinds = []string{ledger.DeadLetterStep, ledger.DeadLetterBus}

// registerPendingDeadLetters reports lucius_dead_letters_pending{kind}, the
// dead letters in the ledger nobody has dealt with (a step dead letter until
// its job is replayed; a bus dead letter for good), read with one query per
// collection, bounded by pendingTimeout. The reconciler alone reports it,
// so the ledger is read once per scrape, not once per process. Unregister
// the result before the store's pool closes.
func registerPendingDeadLetters(meter metric.Meter, store *ledger.Store) (metric.Registration, error) {
	gauge, err := meter.Int64ObservableGauge("lucius_dead_letters_pending",
		metric.WithDescription("Dead letters not dealt with (step: job not replayed; bus: all), by kind."))
	if err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, pendingTimeout)
		defer cancel()
		pending, err := store.PendingDeadLetters(ctx)
		if err != nil {
			return err
		}
		for _, kind := range pendingKinds {
			o.ObserveInt64(gauge, pending[kind], metric.WithAttributes(attribute.String("kind", kind)))
		}
		return nil
	}, gauge)
}
