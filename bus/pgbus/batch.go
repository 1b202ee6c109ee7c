package pgbus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/bus"
)

// Batching of the two statements every message pays for besides its send and
// claim. Each batcher runs a statement as soon as it has work; what arrives
// while one is running goes into the next, so batches grow with load and a
// lone call waits for nothing.

const (
	notifyTimeout    = 5 * time.Second
	completeTimeout  = 30 * time.Second
	completeWorkers  = 4   // statements in flight at once
	completeMaxBatch = 500 // rows per statement
)

// notifier sends NOTIFY for the channels of paths that got messages, one
// statement for everything pending, off the sender's path: the write has
// committed, and a lost notification only delays receivers until they poll.
type notifier struct {
	pool *pgxpool.Pool
	self string
	log  *slog.Logger

	mu      sync.Mutex
	pending map[string]struct{}
	kick    chan struct{}
}

func newNotifier(pool *pgxpool.Pool, self string, log *slog.Logger) *notifier {
	return &notifier{pool: pool, self: self, log: log, pending: make(map[string]struct{}), kick: make(chan struct{}, 1)}
}

func (n *notifier) add(channel string) {
	n.mu.Lock()
	n.pending[channel] = struct{}{}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// run sends pending notifications until ctx ends, then sends what is left.
// Statements run to completion (or notifyTimeout) even when ctx ends.
func (n *notifier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			n.flush(context.WithoutCancel(ctx))
			return
		case <-n.kick:
			n.flush(context.WithoutCancel(ctx))
		}
	}
}

func (n *notifier) flush(ctx context.Context) {
	n.mu.Lock()
	channels := make([]string, 0, len(n.pending))
	for ch := range n.pending {
		channels = append(channels, ch)
	}
	clear(n.pending)
	n.mu.Unlock()
	if len(channels) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	if _, err := n.pool.Exec(ctx, qNotify, channels, n.self); err != nil {
		n.log.WarnContext(ctx, "notify receivers", "channels", len(channels), "error", err)
	}
}

// completion is one Complete call waiting for its batch.
type completion struct {
	seq   int64
	token string
	path  string
	done  chan error // buffered: the caller may have left
}

// completer deletes completed messages for concurrent Complete calls in
// shared statements: one delete, one commit for many messages.
type completer struct {
	pool *pgxpool.Pool
	reqs chan completion
}

func newCompleter(pool *pgxpool.Pool) *completer {
	return &completer{pool: pool, reqs: make(chan completion, 4*completeMaxBatch)}
}

// complete waits for the completion of one delivery. done is the bus's
// closed channel.
func (c *completer) complete(ctx context.Context, done <-chan struct{}, seq int64, token, path string) error {
	req := completion{seq: seq, token: token, path: path, done: make(chan error, 1)}
	select {
	case c.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return bus.ErrClosed
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return bus.ErrClosed
	}
}

// run serves completions until ctx ends.
func (c *completer) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range completeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]completion, 0, completeMaxBatch)
			for {
				batch = batch[:0]
				select {
				case <-ctx.Done():
					return
				case req := <-c.reqs:
					batch = append(batch, req)
				}
			fill:
				for len(batch) < completeMaxBatch {
					select {
					case req := <-c.reqs:
						batch = append(batch, req)
					default:
						break fill
					}
				}
				c.flush(ctx, batch)
			}
		}()
	}
	wg.Wait()
}

func (c *completer) flush(ctx context.Context, batch []completion) {
	seqs := make([]int64, len(batch))
	tokens := make([]string, len(batch))
	paths := make([]string, len(batch))
	for i, r := range batch {
		seqs[i], tokens[i], paths[i] = r.seq, r.token, r.path
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	deleted := make(map[int64]bool, len(batch))
	rows, err := c.pool.Query(ctx, qComplete, seqs, tokens, paths)
	if err == nil {
		for rows.Next() {
			var seq int64
			if err = rows.Scan(&seq); err != nil {
				break
			}
			deleted[seq] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	for _, r := range batch {
		switch {
		case err != nil:
			r.done <- fmt.Errorf("complete %s seq %d: %w", r.path, r.seq, err)
		case deleted[r.seq]:
			// The same delivery completed twice in one batch succeeds once.
			delete(deleted, r.seq)
			r.done <- nil
		default:
			r.done <- fmt.Errorf("complete %s seq %d: %w", r.path, r.seq, bus.ErrLockLost)
		}
	}
}
