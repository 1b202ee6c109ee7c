package reconciler

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/core/ledger"
)

// DispatcherConfig tunes the outbox dispatcher.
type DispatcherConfig struct {
	// BatchSize is the most rows claimed per round (default 200).
	BatchSize int
	// Lease hides claimed rows from other dispatchers while this one publishes
	// to a bus outside the ledger's database (default 5s). A dispatcher that
	// dies mid-publish delays its batch by this. A bus in the ledger's
	// database (bus.TxPublisher: the PostgreSQL bus) is published to in the
	// transaction that holds the rows.
	Lease time.Duration
	// PollInterval is the fallback when no notification arrives (default 1s).
	PollInterval time.Duration
	// RetryAfter delays a row whose publish failed (default 2s).
	RetryAfter time.Duration
}

func (c *DispatcherConfig) defaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.Lease == 0 {
		// Short: rows a killed dispatcher claimed wait this long. A publish
		// outlasting it only sends a copy the bus drops as a duplicate.
		c.Lease = 5 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = 2 * time.Second
	}
}

// dispatcher publishes outbox rows to the bus and marks them sent. Several may
// run at once: claims skip each other's rows. Publishing twice (a crash between
// publish and mark) is harmless: message ids are stable and the bus drops the
// duplicate. A bus that can publish in the ledger's transactions
// (bus.TxPublisher, in the ledger's database: the PostgreSQL bus) is written
// in the transaction that marks the rows sent: one commit, no duplicates. Any
// other bus (Azure Service Bus) is published to after the claim's commit, and
// the rows are marked sent after the publish.
type dispatcher struct {
	store *ledger.Store
	bus   bus.Bus
	inTx  bus.TxPublisher // bus, when it can send in a ledger transaction
	pool  *pgxpool.Pool
	cfg   DispatcherConfig
	log   *slog.Logger

	mu      sync.Mutex
	senders map[string]bus.Sender

	published metric.Int64Counter
	failures  metric.Int64Counter
	lag       metric.Float64Histogram
	// backlog reads the outbox at each collection until close.
	backlog metric.Registration
}

func newDispatcher(store *ledger.Store, b bus.Bus, pool *pgxpool.Pool, cfg DispatcherConfig, log *slog.Logger) (*dispatcher, error) {
	cfg.defaults()
	meter := otel.Meter("lucius/reconciler")
	published, err := meter.Int64Counter("lucius_outbox_published_total", metric.WithDescription("Outbox messages published, by kind."))
	if err != nil {
		return nil, err
	}
	failures, err := meter.Int64Counter("lucius_outbox_publish_failures_total", metric.WithDescription("Outbox publish failures, by destination."))
	if err != nil {
		return nil, err
	}
	lag, err := meter.Float64Histogram("lucius_outbox_dispatch_lag_seconds",
		metric.WithDescription("Time from outbox write to publish."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
	if err != nil {
		return nil, err
	}
	d := &dispatcher{store: store, bus: b, pool: pool, cfg: cfg, log: log, senders: map[string]bus.Sender{},
		published: published, failures: failures, lag: lag}
	if tp := b.TxPublisher(); tp != nil && tp.InDatabase(pool) {
		d.inTx = tp
	}
	backlog, err := meter.Int64ObservableGauge("lucius_outbox_backlog", metric.WithDescription("Unsent outbox messages."))
	if err != nil {
		return nil, err
	}
	oldest, err := meter.Float64ObservableGauge("lucius_outbox_oldest_age_seconds", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest unsent outbox message (0: none)."))
	if err != nil {
		return nil, err
	}
	// One query per scrape answers both: how many wait, and for how long.
	d.backlog, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		n, age, err := store.OutboxBacklog(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(backlog, n)
		o.ObserveFloat64(oldest, age.Seconds())
		return nil
	}, backlog, oldest)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// close stops reporting the backlog.
func (d *dispatcher) close() { unregister(d.backlog, d.log) }

// unregister stops a gauge's callback: a collection after the ledger's pool
// has closed would fail every metric read with it.
func unregister(r metric.Registration, log *slog.Logger) {
	if err := r.Unregister(); err != nil {
		log.Warn("unregister a gauge", "error", err)
	}
}

// run publishes until ctx ends. wake fires after every commit that wrote
// outbox rows (ledger.NotifyChannel); a poll is the fallback.
func (d *dispatcher) run(ctx context.Context, wake <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			d.closeSenders()
			return
		case <-wake:
		case <-timer.C:
		}
		for {
			n, err := d.round(ctx)
			if err != nil && ctx.Err() == nil {
				d.log.WarnContext(ctx, "dispatch round", telemetry.Err(err))
			}
			if err != nil || n < d.cfg.BatchSize {
				break // a full batch means more may be waiting: go again at once
			}
		}
		timer.Reset(d.cfg.PollInterval)
	}
}

// round publishes one batch and returns the number of rows it claimed.
func (d *dispatcher) round(ctx context.Context) (int, error) {
	claim := ledger.OutboxClaim{Limit: d.cfg.BatchSize, Lease: d.cfg.Lease,
		Kinds: []string{ledger.KindCompletion}, Exclude: true} // callbacks go over HTTP, see deliverer
	if d.inTx == nil {
		return d.leasedRound(ctx, claim)
	}
	var announce []func()
	var sent []ledger.OutboxMessage
	n, err := d.store.PublishOutbox(ctx, claim, func(ctx context.Context, tx pgx.Tx, msgs []ledger.OutboxMessage) error {
		announce, sent = nil, msgs
		for dest, batch := range byDestination(msgs) {
			err := d.send(ctx, dest, batch, func(ctx context.Context, m ...bus.Message) error {
				a, err := d.inTx.SendInTx(ctx, tx, dest, m...)
				if err == nil {
					announce = append(announce, a)
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		// Which destination failed, and how long to wait for it, is the
		// leased round's work: it releases the rows it could not publish.
		d.log.WarnContext(ctx, "publish in one transaction failed; publishing batch by batch", telemetry.Err(err))
		return d.leasedRound(ctx, claim)
	}
	for _, a := range announce {
		a()
	}
	d.count(ctx, sent)
	return n, nil
}

// byDestination groups msgs by destination, keeping their order.
func byDestination(msgs []ledger.OutboxMessage) iter.Seq2[string, []ledger.OutboxMessage] {
	return func(yield func(string, []ledger.OutboxMessage) bool) {
		byDest := map[string][]ledger.OutboxMessage{}
		var order []string
		for _, m := range msgs {
			if _, ok := byDest[m.Destination]; !ok {
				order = append(order, m.Destination)
			}
			byDest[m.Destination] = append(byDest[m.Destination], m)
		}
		for _, dest := range order {
			if !yield(dest, byDest[dest]) {
				return
			}
		}
	}
}

// leasedRound claims one batch with a lease, publishes it grouped by
// destination, and marks what was published.
func (d *dispatcher) leasedRound(ctx context.Context, claim ledger.OutboxClaim) (int, error) {
	msgs, err := d.store.ClaimOutbox(ctx, claim)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	var sent []ledger.OutboxMessage
	for dest, batch := range byDestination(msgs) {
		if err := d.publish(ctx, dest, batch); err != nil {
			d.failures.Add(ctx, int64(len(batch)), metric.WithAttributes(attribute.String("destination", dest)))
			d.log.WarnContext(ctx, "publish failed; will retry", telemetry.KeyTopic, dest, "messages", len(batch), telemetry.Err(err))
			for _, m := range batch {
				if rerr := d.store.ReleaseOutbox(ctx, m.ID, err.Error(), d.cfg.RetryAfter); rerr != nil {
					d.log.WarnContext(ctx, "release outbox row", telemetry.Err(rerr))
				}
			}
			continue
		}
		sent = append(sent, batch...)
	}
	if err := d.store.MarkSent(ctx, sent); err != nil {
		// Published but not marked: the lease expires and the rows are published
		// again, which the bus drops as duplicates.
		return len(msgs), fmt.Errorf("mark %d sent: %w", len(sent), err)
	}
	d.count(ctx, sent)
	return len(msgs), nil
}

// count records published messages in the metrics.
func (d *dispatcher) count(ctx context.Context, sent []ledger.OutboxMessage) {
	now := time.Now()
	for _, m := range sent {
		d.published.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", m.Kind)))
		d.lag.Record(ctx, now.Sub(m.CreatedAt).Seconds(), metric.WithAttributes(attribute.String("kind", m.Kind)))
	}
}

// publish sends batch to dest with the destination's sender.
func (d *dispatcher) publish(ctx context.Context, dest string, batch []ledger.OutboxMessage) error {
	sender, err := d.sender(ctx, dest)
	if err != nil {
		return err
	}
	return d.send(ctx, dest, batch, sender.Send)
}

// send turns batch into bus messages and sends them with sendFn, in a span
// linked to the trace each message carries.
func (d *dispatcher) send(ctx context.Context, dest string, batch []ledger.OutboxMessage,
	sendFn func(ctx context.Context, m ...bus.Message) error) error {
	msgs := make([]bus.Message, len(batch))
	for i, m := range batch {
		msgs[i] = bus.Message{ID: m.MessageID, Body: m.Body, ContentType: m.ContentType, Properties: m.Properties,
			Key: m.Key, CorrelationID: m.CorrelationID, Subject: m.Subject, ScheduledAt: m.ScheduledAt, Priority: m.Priority}
	}
	// One span per batch, linked to the trace each message carries, and in
	// each message's own trace a span for its relay, a child of the work that
	// enqueued it, so that a job's trace shows every hop.
	var links []trace.Link
	var relays []trace.Span
	tracer := otel.Tracer("lucius/reconciler")
	for _, m := range batch {
		mctx := otel.GetTextMapPropagator().Extract(context.Background(), bus.PropertiesCarrier(m.Properties))
		if sc := trace.SpanContextFromContext(mctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
			_, relay := tracer.Start(mctx, "outbox relay "+dest, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(attribute.String("messaging.destination.name", dest), attribute.String("messaging.message.id", m.MessageID)))
			relays = append(relays, relay)
		}
	}
	ctx, span := tracer.Start(ctx, "outbox publish "+dest,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("messaging.destination.name", dest), attribute.Int("messaging.batch.message_count", len(msgs))))
	err := sendFn(ctx, msgs...)
	for _, relay := range relays {
		relay.AddLink(trace.Link{SpanContext: span.SpanContext()})
		if err != nil {
			relay.SetStatus(codes.Error, err.Error())
		}
		relay.End()
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

func (d *dispatcher) sender(ctx context.Context, dest string) (bus.Sender, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.senders[dest]; ok {
		return s, nil
	}
	s, err := d.bus.NewSender(ctx, dest)
	if err != nil {
		return nil, err
	}
	d.senders[dest] = s
	return s, nil
}

func (d *dispatcher) closeSenders() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.senders {
		s.Close(context.Background()) //nolint:errcheck
	}
}

// listen forwards notifications on channel to the wake channels named in
// their payload (comma-separated keys of wakes; an empty payload wakes all),
// reconnecting on failure.
func listen(ctx context.Context, pool *pgxpool.Pool, channel string, log *slog.Logger, wakes map[string]chan<- struct{}) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			defer conn.Exec(context.Background(), "UNLISTEN "+channel) //nolint:errcheck
			poke(wakes, "")                                            // catch up on anything missed while not listening
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					return err
				}
				poke(wakes, n.Payload)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		log.WarnContext(ctx, "outbox listener reconnecting", telemetry.Err(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// poke wakes the channels of wakes named in payload (comma-separated keys);
// an empty payload wakes them all.
func poke(wakes map[string]chan<- struct{}, payload string) {
	named := strings.Split(payload, ",")
	for key, wake := range wakes {
		if payload != "" && !slices.Contains(named, key) {
			continue
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// purgeLoop deletes sent outbox rows older than retain, keeping the table small.
func purgeLoop(ctx context.Context, store *ledger.Store, every, retain time.Duration, log *slog.Logger) {
	loop.Every(ctx, every, false, func(ctx context.Context) {
		n, err := loop.Drain(ctx, 5000, 30*time.Second, func(ctx context.Context, limit int) (int64, error) {
			return store.PurgeSentOutbox(ctx, retain, limit)
		})
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "purge outbox", telemetry.Err(err))
		}
		if n > 0 {
			log.DebugContext(ctx, "purged sent outbox rows", "rows", n)
		}
	})
}
