package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/telemetry"
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
}

// pollWait is how long one round waits on each empty dead-letter queue. It
// bounds the claim query too, so it must outlast a slow query on a busy
// database: at 50 ms a loaded machine never collected anything.
const pollWait = 250 * time.Millisecond

// round collects every dead-letter queue once, a few at a time.
func (c *collector) round(ctx context.Context, m *sweepMetrics) {
	sources, err := c.sources(ctx)
	if err != nil {
		m.failed(ctx, "dead_letters", err)
		return
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, src := range sources {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.drain(ctx, src.DeadLetterQueue(), m)
		}()
	}
	wg.Wait()
}

func (c *collector) drain(ctx context.Context, src bus.Source, m *sweepMetrics) {
	rcv, err := c.receiver(ctx, src)
	if err != nil {
		m.failed(ctx, "dead_letters", err, "entity", src.Path())
		return
	}
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

func (c *collector) receiver(ctx context.Context, src bus.Source) (bus.Receiver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.receivers[src.Path()]; ok {
		return r, nil
	}
	r, err := c.bus.NewReceiver(ctx, src)
	if err != nil {
		return nil, err
	}
	c.receivers[src.Path()] = r
	return r, nil
}

func (c *collector) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.receivers {
		_ = r.Close(context.Background())
	}
}
