package config

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// DefaultPoll is how often a Watcher reloads without a notification: the
// fallback for a lost LISTEN connection, not the normal path.
const DefaultPoll = 30 * time.Second

// Watcher keeps a process's copy of the configuration current: it loads the
// snapshot at start, reloads when Channel is notified (within milliseconds of
// a change), and reloads every Poll as a fallback.
type Watcher struct {
	store *Store
	pool  *pgxpool.Pool
	log   *slog.Logger
	poll  time.Duration
	cur   atomic.Pointer[Snapshot]

	mu        sync.Mutex
	listeners []func(*Snapshot)
	stop      context.CancelFunc
	done      chan struct{}
}

// Watch loads the configuration and keeps it current until Close. poll 0
// means DefaultPoll.
func Watch(ctx context.Context, pool *pgxpool.Pool, poll time.Duration, log *slog.Logger) (*Watcher, error) {
	if poll <= 0 {
		poll = DefaultPoll
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{store: NewStore(pool), pool: pool, log: log, poll: poll, done: make(chan struct{})}
	snap, err := w.store.Load(ctx)
	if err != nil {
		return nil, err
	}
	w.cur.Store(snap)
	if _, err := otel.Meter("lucius/config").Int64ObservableGauge("lucius_config_revision",
		metric.WithDescription("The configuration revision this process applies."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(w.Current().Revision)
			return nil
		})); err != nil {
		return nil, err
	}
	run, stop := context.WithCancel(context.WithoutCancel(ctx))
	w.stop = stop
	go w.run(run)
	return w, nil
}

// Current is the latest snapshot; never nil. Callers must not modify it.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// Store is the store the watcher reads.
func (w *Watcher) Store() *Store { return w.store }

// OnChange registers fn, called (from the watcher's goroutine) with every
// new snapshot.
func (w *Watcher) OnChange(fn func(*Snapshot)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listeners = append(w.listeners, fn)
}

// Close stops watching.
func (w *Watcher) Close() {
	w.stop()
	<-w.done
}

// Reload loads the configuration now (the API calls it after a change, so
// its own process does not wait for the notification).
func (w *Watcher) Reload(ctx context.Context) error {
	snap, err := w.store.Load(ctx)
	if err != nil {
		return err
	}
	w.apply(snap)
	return nil
}

// apply installs snap unless a newer one is installed already.
func (w *Watcher) apply(snap *Snapshot) {
	for {
		old := w.cur.Load()
		if snap.Revision <= old.Revision {
			return
		}
		if w.cur.CompareAndSwap(old, snap) {
			break
		}
	}
	w.log.Info("configuration changed", "revision", snap.Revision)
	w.mu.Lock()
	listeners := slices.Clone(w.listeners)
	w.mu.Unlock()
	for _, fn := range listeners {
		fn(snap)
	}
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	revisions := make(chan int64, 1)
	go w.listen(ctx, revisions)
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rev := <-revisions:
			if rev != 0 && rev <= w.Current().Revision {
				continue // already applied (our own Reload)
			}
		case <-t.C:
		}
		if err := w.Reload(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("reload configuration", "error", err)
		}
	}
}

// listen forwards notified revisions (0 after a reconnect: reload anyway, a
// change may have been missed), reconnecting on failure.
func (w *Watcher) listen(ctx context.Context, revisions chan<- int64) {
	send := func(rev int64) {
		select {
		case revisions <- rev:
		default: // a reload is pending; it will read the latest
		}
	}
	for ctx.Err() == nil {
		err := func() error {
			conn, err := w.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
				return err
			}
			defer conn.Exec(context.Background(), "UNLISTEN "+Channel) //nolint:errcheck
			send(0)
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					return err
				}
				rev, _ := strconv.ParseInt(n.Payload, 10, 64)
				send(rev)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("configuration listener reconnecting", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
