package pgbus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/base/loop"
)

// channelName is the NOTIFY channel of a path: paths can be longer than the
// 63 bytes of an identifier and contain any character, so it is a hash.
func channelName(path string) string {
	sum := sha256.Sum256([]byte(path))
	return "bus_" + hex.EncodeToString(sum[:16])
}

// waiter is where the receivers of one path in this process wait. The
// one-slot channel wakes one receiver per signal and remembers a signal
// that arrives while every receiver is busy.
type waiter struct {
	path    string
	channel string
	ch      chan struct{}
	refs    int

	// quietUntil is set when a claim found nothing more to take: until
	// then nothing becomes claimable on the path except by a send, whose
	// notification wakes the waiter, or by a lock expiring in another
	// process, which the Bus's poll finds. A receiver that comes back for
	// more then waits instead of claiming in vain, which on a busy bus is
	// most claims (each one index scans, a round trip and a wake-up of the
	// database backend). Zero: claim at once. idle: nothing is due at all.
	mu         sync.Mutex
	quietUntil time.Time
	idle       bool
}

// untilWoken is the quiet of a path with nothing due: only a wake-up
// (a notification, the Bus's poll, a listener reconnect) ends it.
const untilWoken time.Duration = math.MaxInt64

func (w *waiter) wake() {
	w.setQuiet(0)
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// setQuiet records that nothing is claimable for d (0: maybe now).
func (w *waiter) setQuiet(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.quietUntil, w.idle = time.Time{}, d == untilWoken
	if d > 0 && !w.idle {
		w.quietUntil = time.Now().Add(d)
	}
}

// quietFor is how long nothing is claimable unless the waiter is woken.
func (w *waiter) quietFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.idle:
		return untilWoken
	case w.quietUntil.IsZero():
		return 0
	}
	return time.Until(w.quietUntil)
}

// register returns the waiter of path, listening for its channel first so
// that no notification sent after register returns is missed.
func (b *Bus) register(ctx context.Context, path string) (*waiter, error) {
	b.mu.Lock()
	w := b.waiters[path]
	if w == nil {
		w = &waiter{path: path, channel: channelName(path), ch: make(chan struct{}, 1)}
		b.waiters[path] = w
		b.byChan[w.channel] = w
	}
	w.refs++
	b.mu.Unlock()
	if err := b.listener.subscribe(ctx, w.channel); err != nil {
		b.unregister(w)
		return nil, err
	}
	return w, nil
}

func (b *Bus) unregister(w *waiter) {
	b.mu.Lock()
	w.refs--
	if w.refs == 0 {
		delete(b.waiters, w.path)
		delete(b.byChan, w.channel)
	}
	b.mu.Unlock()
	b.listener.unsubscribe(w.channel)
}

// wake signals one local receiver of path, if there is one.
func (b *Bus) wake(path string) {
	b.mu.Lock()
	w := b.waiters[path]
	b.mu.Unlock()
	if w != nil {
		w.wake()
	}
}

// dispatch handles a notification from another Bus.
func (b *Bus) dispatch(channel string) {
	b.mu.Lock()
	w := b.byChan[channel]
	b.mu.Unlock()
	if w != nil {
		w.wake()
	}
}

// wakeAll signals every path: after the listener reconnects, notifications
// sent while it was away are lost.
func (b *Bus) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.waiters {
		w.wake()
	}
}

// Listener timing.
const (
	pingEvery      = 30 * time.Second // check an idle connection this often
	pingTimeout    = 5 * time.Second
	minReconnect   = 100 * time.Millisecond
	maxReconnect   = 10 * time.Second
	listenTimeout  = 10 * time.Second // for one LISTEN or UNLISTEN
	connectTimeout = 10 * time.Second
)

// listener owns the Bus's LISTEN connection. Receivers subscribe to channels
// (reference counted); the run loop applies the changes between waits for
// notifications, interrupting a wait when the set changes.
type listener struct {
	self     string
	connCfg  *pgx.ConnConfig
	log      *slog.Logger
	dispatch func(channel string)
	wakeAll  func()

	mu        sync.Mutex
	conn      *pgx.Conn // set while connected; used only by run
	want      map[string]int
	listening map[string]bool
	pending   map[string][]chan struct{} // closed once the channel is listened to
	dirty     bool
	interrupt context.CancelFunc
}

func newListener(self string, connCfg *pgx.ConnConfig, log *slog.Logger, dispatch func(string), wakeAll func()) *listener {
	return &listener{
		self:      self,
		connCfg:   connCfg,
		log:       log,
		dispatch:  dispatch,
		wakeAll:   wakeAll,
		want:      make(map[string]int),
		listening: make(map[string]bool),
		pending:   make(map[string][]chan struct{}),
	}
}

func (l *listener) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, l.connCfg)
	if err != nil {
		return fmt.Errorf("listener connect: %w", err)
	}
	l.mu.Lock()
	l.conn = conn
	l.dirty = true
	l.mu.Unlock()
	return nil
}

// subscribe adds a reference to channel and returns once the connection
// listens to it. While disconnected it returns at once: the reconnect listens
// to every wanted channel and then wakes all receivers.
func (l *listener) subscribe(ctx context.Context, channel string) error {
	l.mu.Lock()
	l.want[channel]++
	if l.listening[channel] || l.conn == nil {
		l.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	l.pending[channel] = append(l.pending[channel], ready)
	l.changed()
	l.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("listen: %w", ctx.Err())
	}
}

func (l *listener) unsubscribe(channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.want[channel]--; l.want[channel] <= 0 {
		delete(l.want, channel)
		l.changed()
	}
}

// changed marks the channel set dirty and interrupts a wait. Hold l.mu.
func (l *listener) changed() {
	l.dirty = true
	if l.interrupt != nil {
		l.interrupt()
		l.interrupt = nil
	}
}

// run serves the connection until ctx ends, reconnecting with backoff. The
// backoff resets once a connection has lasted longer than the longest backoff.
func (l *listener) run(ctx context.Context) {
	backoff := minReconnect
	reconnect := false
	for {
		if reconnect {
			if err := l.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.log.WarnContext(ctx, "bus listener reconnect", "error", err, "retry_in", backoff)
				if !loop.Sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, maxReconnect)
				continue
			}
			l.log.InfoContext(ctx, "bus listener reconnected")
		}
		l.mu.Lock()
		conn := l.conn
		l.mu.Unlock()
		started := time.Now()
		// After a reconnect, wake every receiver once the channels are
		// listened to again: notifications sent meanwhile are lost.
		err := l.serve(ctx, conn, reconnect)
		l.disconnect(ctx, conn, err)
		if ctx.Err() != nil {
			return
		}
		reconnect = true
		if time.Since(started) > maxReconnect {
			backoff = minReconnect
			continue
		}
		if !loop.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxReconnect)
	}
}

// disconnect drops conn after serve returned err.
func (l *listener) disconnect(ctx context.Context, conn *pgx.Conn, err error) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	conn.Close(closeCtx) //nolint:errcheck // the connection is being thrown away
	cancel()
	l.mu.Lock()
	l.conn = nil
	clear(l.listening)
	// Waiting subscribers go back to polling until the reconnect wakes them.
	for ch, readies := range l.pending {
		for _, r := range readies {
			close(r)
		}
		delete(l.pending, ch)
	}
	l.mu.Unlock()
	if ctx.Err() == nil {
		l.log.WarnContext(ctx, "bus listener lost its connection", "error", err)
	}
}

// serve listens on conn until it fails or ctx ends.
func (l *listener) serve(ctx context.Context, conn *pgx.Conn, wakeAfterListen bool) error {
	for {
		if err := l.sync(ctx, conn); err != nil {
			return err
		}
		if wakeAfterListen {
			l.wakeAll()
			wakeAfterListen = false
		}
		l.mu.Lock()
		if l.dirty {
			l.mu.Unlock()
			continue
		}
		waitCtx, cancel := context.WithTimeout(ctx, pingEvery)
		l.interrupt = cancel
		l.mu.Unlock()

		n, err := conn.WaitForNotification(waitCtx)

		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			if n.Payload != l.self {
				l.dispatch(n.Channel)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case conn.IsClosed():
			return err
		case errors.Is(waitCtx.Err(), context.DeadlineExceeded):
			pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		case waitCtx.Err() != nil:
			// Interrupted: the channel set changed.
		default:
			return err
		}
	}
}

// sync brings the connection's LISTEN set in line with the wanted channels.
func (l *listener) sync(ctx context.Context, conn *pgx.Conn) error {
	l.mu.Lock()
	l.dirty = false
	var add, remove []string
	for ch := range l.want {
		if !l.listening[ch] {
			add = append(add, ch)
		}
	}
	for ch := range l.listening {
		if l.want[ch] == 0 {
			remove = append(remove, ch)
		}
	}
	l.mu.Unlock()

	exec := func(stmt string) error {
		ectx, cancel := context.WithTimeout(ctx, listenTimeout)
		defer cancel()
		_, err := conn.Exec(ectx, stmt)
		return err
	}
	for _, ch := range add {
		if err := exec(qListen(ch)); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	for _, ch := range remove {
		if err := exec(qUnlisten(ch)); err != nil {
			return fmt.Errorf("unlisten %s: %w", ch, err)
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range add {
		l.listening[ch] = true
	}
	for _, ch := range remove {
		delete(l.listening, ch)
	}
	for ch, readies := range l.pending {
		// Listening now, or no longer wanted (the subscriber gave up).
		if l.listening[ch] || l.want[ch] == 0 {
			for _, r := range readies {
				close(r)
			}
			delete(l.pending, ch)
		}
	}
	return nil
}
