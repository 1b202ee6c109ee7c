package ledger

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier sends NOTIFY on NotifyChannel after commits, outside the write
// transaction: a NOTIFY inside a durable transaction serializes commits on a
// database-wide lock. Bursts of pokes coalesce into one notification.
type notifier struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	wake chan struct{}
	done chan struct{}
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	n := &notifier{pool: pool, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go n.run()
	return n
}

func (n *notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default: // a notification is already pending
	}
}

func (n *notifier) run() {
	for {
		select {
		case <-n.done:
			return
		case <-n.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel); err != nil {
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
