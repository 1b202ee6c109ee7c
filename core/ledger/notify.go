package ledger

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The payload of a notification on NotifyChannel names what the committed
// outbox rows wait for, comma-separated, so each consumer wakes only for its
// own rows. An empty payload means anything may be waiting.
const (
	NotifyPublish   = "publish"   // messages for the bus (the dispatcher)
	NotifyCallbacks = "callbacks" // completion callbacks (the deliverer)
)

// notifier sends NOTIFY on NotifyChannel after commits, outside the write
// transaction: a NOTIFY inside a durable transaction serializes commits on a
// database-wide lock. Bursts of pokes coalesce into one notification.
type notifier struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	wake chan struct{}
	done chan struct{}

	mu      sync.Mutex
	pending map[string]bool // payload parts not yet sent
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	n := &notifier{pool: pool, log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), pending: map[string]bool{}}
	go n.run()
	return n
}

// poke asks for a notification naming what waits (NotifyPublish, NotifyCallbacks).
func (n *notifier) poke(waiting ...string) {
	n.mu.Lock()
	for _, w := range waiting {
		n.pending[w] = true
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // a notification is already pending
	}
}

// payload takes the pending parts, in a stable order.
func (n *notifier) payload() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	for _, p := range []string{NotifyPublish, NotifyCallbacks} {
		if n.pending[p] {
			parts = append(parts, p)
		}
	}
	clear(n.pending)
	return strings.Join(parts, ",")
}

// sqlNotify does not wait for the WAL flush: a NOTIFY takes a transaction id,
// so a durable commit would wait for an fsync, and a notification lost in a
// crash costs only latency (the consumers' polls find the rows).
const sqlNotify = `SELECT pg_notify($1, $2) FROM set_config('synchronous_commit', 'off', true)`

func (n *notifier) run() {
	for {
		select {
		case <-n.done:
			return
		case <-n.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := n.pool.Exec(ctx, sqlNotify, NotifyChannel, n.payload()); err != nil {
			// The dispatcher's poll still finds the rows; only latency suffers.
			n.log.Warn("outbox notify", "err", err)
		}
		cancel()
	}
}

func (n *notifier) close() {
	select {
	case <-n.done:
	default:
		close(n.done)
	}
}
