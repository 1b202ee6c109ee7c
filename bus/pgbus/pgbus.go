// Package pgbus is the PostgreSQL implementation of package bus: the embedded
// default transport, so one database is all a deployment needs.
//
// Every receivable copy of a message is a row of bus_messages keyed by a global
// sequence number and the path it is received from ("queue",
// "topic/subscriptions/sub", either with "/$deadletterqueue"). A row's
// available_at is its enqueue or scheduled time while it is free and its lock
// expiry while it is locked, so claiming is one indexed range scan with FOR
// UPDATE SKIP LOCKED, and an expired lock needs no sweeper. A topic send writes
// one row per matching subscription in the same statement that records the
// message ids for duplicate detection.
//
// Receivers wait on LISTEN/NOTIFY: after a send commits, the sender notifies
// the channels of the paths it wrote (a separate statement, never inside the
// write). Each Bus holds one listening connection and wakes one local receiver
// per notification; a receiver whose claim left messages behind passes the
// wake-up on.
// A slow poll and a timer for the next scheduled message or lock expiry back
// the notifications up.
//
// As in Service Bus, expired messages are dead-lettered or dropped when a
// receiver of their entity claims them, and a message's TTL is capped by its
// entity's default TTL. Unlike it, sequence numbers come from one sequence for
// all entities: unique and growing per entity, with gaps. Concurrent Complete
// calls share one DELETE, and NOTIFYs go out in batches from a background
// goroutine.
package pgbus

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the bus tables (bus_*). Apply them with package migrate.
var Migrations = migrate.Embedded("bus", migrationFiles, "migrations")

// Config tunes a Bus. Zero values take the defaults noted.
type Config struct {
	// PollInterval is how often the Bus asks, in one statement for all its
	// waiting receivers, whether anything became claimable that no
	// notification announced: a lock that expired in another process (its
	// holder died) or a lost notification. Default 2s.
	PollInterval time.Duration
	// PurgeInterval is how often expired duplicate-detection ids are deleted.
	// Default 1 minute.
	PurgeInterval time.Duration
	// Logger receives listener reconnects and claim errors. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive the bus's metrics (bustel.Metric*
	// names) and its send and receive spans. Default: the OpenTelemetry
	// globals.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Propagator writes trace context into the application properties of
	// messages sent and reads it from those received. Default: the
	// OpenTelemetry global (W3C trace context and baggage once package
	// telemetry has set up the process).
	Propagator propagation.TextMapPropagator
}

// Defaults for Config.
const (
	DefaultPollInterval  = 2 * time.Second
	DefaultPurgeInterval = time.Minute
)

// Validate reports an invalid configuration.
func (c Config) Validate() error {
	var errs []error
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("poll interval %v is negative", c.PollInterval))
	}
	if c.PurgeInterval < 0 {
		errs = append(errs, fmt.Errorf("purge interval %v is negative", c.PurgeInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgbus config: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = DefaultPurgeInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Bus is a bus.Bus on a PostgreSQL database migrated with Migrations.
type Bus struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	// id marks this Bus's own notifications, which it acts on locally at once
	// and ignores when they come back through LISTEN.
	id        string
	listener  *listener
	notifier  *notifier
	completer *completer
	tel       *bustel.Instruments

	claims atomic.Int64 // claim statements run, for tests
	polls  atomic.Int64 // poll statements run, for tests

	mu      sync.Mutex
	waiters map[string]*waiter // by path
	byChan  map[string]*waiter // by notification channel

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

var (
	_ bus.Bus         = (*Bus)(nil)
	_ bus.TxPublisher = (*Bus)(nil)
)

// TxPublisher returns b: the PostgreSQL bus publishes inside transactions on
// its database (SendInTx).
func (b *Bus) TxPublisher() bus.TxPublisher { return b }

// New starts a Bus on pool, which the caller keeps owning. It opens one more
// connection, outside the pool, to listen for notifications.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("pgbus: bus id: %w", err)
	}
	b := &Bus{
		pool:    pool,
		cfg:     cfg,
		log:     cfg.Logger.With("component", "bus"),
		id:      hex.EncodeToString(id),
		waiters: make(map[string]*waiter),
		byChan:  make(map[string]*waiter),
		done:    make(chan struct{}),
	}
	connCfg := pool.Config().ConnConfig.Copy()
	connCfg.RuntimeParams["application_name"] = "lucius-bus-listener-" + b.id
	b.listener = newListener(b.id, connCfg, b.log, b.dispatch, b.wakeAll)
	b.notifier = newNotifier(pool, b.id, b.log)
	b.completer = newCompleter(pool)
	tel, err := newInstruments(b, cfg)
	if err != nil {
		return nil, err
	}
	b.tel = tel
	if err := b.listener.connect(ctx); err != nil {
		tel.Close() //nolint:errcheck
		return nil, fmt.Errorf("pgbus: %w", err)
	}
	bg, stop := context.WithCancel(context.Background())
	b.stop = stop
	for _, run := range []func(context.Context){b.listener.run, b.notifier.run, b.completer.run, b.purgeLoop, b.pollLoop} {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); run(bg) }()
	}
	return b, nil
}

// Close stops the background work (listener, notifier, completer, purge, poll). Senders and receivers of this
// Bus return bus.ErrClosed afterwards; waiting receives return at once.
func (b *Bus) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		close(b.done)
		b.stop()
		if err := b.tel.Close(); err != nil {
			b.log.WarnContext(ctx, "unregister queue depth metrics", "error", err)
		}
	})
	finished := make(chan struct{})
	go func() { b.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgbus: close: %w", ctx.Err())
	}
}

func (b *Bus) closed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func checkNonNegative(what string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s %v is negative", what, d)
	}
	return nil
}

// EnsureQueue creates the queue or updates its options.
func (b *Bus) EnsureQueue(ctx context.Context, name string, opts bus.QueueOptions) error {
	if b.closed() {
		return fmt.Errorf("ensure queue %s: %w", name, bus.ErrClosed)
	}
	err := errors.Join(bus.CheckEntityName(name),
		checkNonNegative("lock duration", opts.LockDuration),
		checkNonNegative("default TTL", opts.DefaultTTL),
		checkNonNegative("duplicate detection window", opts.DuplicateDetectionWindow))
	if opts.MaxDeliveryCount < 0 {
		err = errors.Join(err, fmt.Errorf("max delivery count %d is negative", opts.MaxDeliveryCount))
	}
	if err != nil {
		return fmt.Errorf("ensure queue %s: %w", name, err)
	}
	maxDeliveries := opts.MaxDeliveryCount
	if maxDeliveries == 0 {
		maxDeliveries = bus.DefaultMaxDeliveryCount
	}
	var ok bool
	err = b.pool.QueryRow(ctx, qEnsureQueue, name,
		orDefault(opts.LockDuration, bus.DefaultLockDuration).Microseconds(),
		maxDeliveries, opts.DeadLetterOnExpiration,
		orDefault(opts.DefaultTTL, bus.DefaultTTL).Microseconds(),
		orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection).Microseconds(),
	).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("ensure queue %s: a topic has that name", name)
	}
	if err != nil {
		return fmt.Errorf("ensure queue %s: %w", name, err)
	}
	return nil
}

// EnsureTopic creates the topic or updates its options.
func (b *Bus) EnsureTopic(ctx context.Context, name string, opts bus.TopicOptions) error {
	if b.closed() {
		return fmt.Errorf("ensure topic %s: %w", name, bus.ErrClosed)
	}
	err := errors.Join(bus.CheckEntityName(name),
		checkNonNegative("default TTL", opts.DefaultTTL),
		checkNonNegative("duplicate detection window", opts.DuplicateDetectionWindow))
	if err != nil {
		return fmt.Errorf("ensure topic %s: %w", name, err)
	}
	var ok bool
	err = b.pool.QueryRow(ctx, qEnsureTopic, name,
		orDefault(opts.DefaultTTL, bus.DefaultTTL).Microseconds(),
		orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection).Microseconds(),
	).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("ensure topic %s: a queue has that name", name)
	}
	if err != nil {
		return fmt.Errorf("ensure topic %s: %w", name, err)
	}
	return nil
}

// EnsureSubscription creates the subscription or updates its options and
// filter. The topic must exist (else bus.ErrNotFound).
func (b *Bus) EnsureSubscription(ctx context.Context, topic, name string, opts bus.SubscriptionOptions) error {
	path := bus.SubscriptionSource(topic, name).Path()
	if b.closed() {
		return fmt.Errorf("ensure subscription %s: %w", path, bus.ErrClosed)
	}
	err := errors.Join(bus.CheckEntityName(topic), bus.CheckSubscriptionName(name),
		checkNonNegative("lock duration", opts.LockDuration),
		checkNonNegative("default TTL", opts.DefaultTTL))
	if opts.MaxDeliveryCount < 0 {
		err = errors.Join(err, fmt.Errorf("max delivery count %d is negative", opts.MaxDeliveryCount))
	}
	if err != nil {
		return fmt.Errorf("ensure subscription %s: %w", path, err)
	}
	maxDeliveries := opts.MaxDeliveryCount
	if maxDeliveries == 0 {
		maxDeliveries = bus.DefaultMaxDeliveryCount
	}
	filter := opts.Filter
	if filter == nil {
		filter = map[string]string{}
	}
	filterJSON, err := json.Marshal(filter)
	if err != nil {
		return fmt.Errorf("ensure subscription %s: filter: %w", path, err)
	}
	var ok bool
	err = b.pool.QueryRow(ctx, qEnsureSubscription, topic, name,
		orDefault(opts.LockDuration, bus.DefaultLockDuration).Microseconds(),
		maxDeliveries, opts.DeadLetterOnExpiration, opts.DefaultTTL.Microseconds(), string(filterJSON),
	).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("ensure subscription %s: topic %s: %w", path, topic, bus.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("ensure subscription %s: %w", path, err)
	}
	return nil
}

// NewSender returns a sender to the queue or topic entity, which must exist.
func (b *Bus) NewSender(ctx context.Context, entity string) (bus.Sender, error) {
	if b.closed() {
		return nil, fmt.Errorf("new sender %s: %w", entity, bus.ErrClosed)
	}
	var kind string
	err := b.pool.QueryRow(ctx, qEntityKind, entity).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("new sender %s: %w", entity, bus.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("new sender %s: %w", entity, err)
	}
	return &sender{b: b, entity: entity, done: make(chan struct{})}, nil
}

// NewReceiver returns a receiver of src, whose queue or subscription must
// exist. It returns once this Bus listens for src's notifications.
func (b *Bus) NewReceiver(ctx context.Context, src bus.Source) (bus.Receiver, error) {
	path := src.Path()
	if b.closed() {
		return nil, fmt.Errorf("new receiver %s: %w", path, bus.ErrClosed)
	}
	if (src.Queue == "") == (src.Topic == "") || (src.Topic != "") != (src.Subscription != "") {
		return nil, fmt.Errorf("new receiver %q: name either a queue or a topic and subscription", path)
	}
	owner := src
	owner.DeadLetter = false
	var exists bool
	if err := b.pool.QueryRow(ctx, qReceivableExists, owner.Path()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("new receiver %s: %w", path, err)
	}
	if !exists {
		return nil, fmt.Errorf("new receiver %s: %w", path, bus.ErrNotFound)
	}
	w, err := b.register(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("new receiver %s: %w", path, err)
	}
	b.tel.Receiving(ctx, path)
	return &receiver{
		b:         b,
		path:      path,
		owner:     owner.Path(),
		deadQueue: owner.DeadLetterQueue().Path(),
		isDLQ:     src.DeadLetter,
		w:         w,
		done:      make(chan struct{}),
	}, nil
}

// purgeLoop deletes expired duplicate-detection ids. Several buses on one
// database may run it at once; SKIP LOCKED keeps them out of each other's way.
func (b *Bus) purgeLoop(ctx context.Context) {
	loop.Every(ctx, b.cfg.PurgeInterval, false, func(ctx context.Context) {
		_, err := loop.Drain(ctx, 5000, 30*time.Second, func(ctx context.Context, limit int) (int64, error) {
			tag, err := b.pool.Exec(ctx, qPurgeDuplicates, limit)
			return tag.RowsAffected(), err
		})
		if err != nil && ctx.Err() == nil {
			b.log.WarnContext(ctx, "purge duplicate-detection ids", "error", err)
		}
	})
}

// pollLoop wakes the waiting receivers of every path that has a claimable
// message no wake-up announced. Receivers wait for wake-ups, not on timers of
// their own: a process with many idle paths (a worker receives from 32
// subscriptions) polls them all with one statement instead of one claim each.
func (b *Bus) pollLoop(ctx context.Context) {
	loop.Every(ctx, b.cfg.PollInterval, false, func(ctx context.Context) {
		var quiet []string
		b.mu.Lock()
		for path, w := range b.waiters {
			if w.quietFor() > 0 {
				quiet = append(quiet, path)
			}
		}
		b.mu.Unlock()
		if len(quiet) == 0 {
			return
		}
		b.polls.Add(1)
		var claimable []string
		rows, err := b.pool.Query(ctx, qClaimable, quiet)
		if err == nil {
			claimable, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			if ctx.Err() == nil {
				b.log.WarnContext(ctx, "bus poll", "paths", len(quiet), "error", err)
			}
			return
		}
		for _, path := range claimable {
			b.wake(path)
		}
	})
}

// announce tells receivers that paths have messages: local ones at once,
// other processes' through NOTIFY, sent in the background after the write
// committed (see notifier).
func (b *Bus) announce(paths []string) {
	for _, p := range paths {
		b.wake(p)
		b.notifier.add(channelName(p))
	}
}
