package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// completions tells closed-loop clients when their jobs end: one poller
// asks the ledger every completionPoll about every job a client waits for,
// so the check costs one query however many clients wait.
type completions struct {
	db      *pgxpool.Pool
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

const completionPoll = 2 * time.Millisecond

func newCompletions(db *pgxpool.Pool) *completions {
	return &completions{db: db, waiting: map[string]chan struct{}{}}
}

// wait returns a channel closed when job id ends.
func (c *completions) wait(id string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.waiting[id]
	if !ok {
		ch = make(chan struct{})
		c.waiting[id] = ch
	}
	return ch
}

// run polls until ctx ends.
func (c *completions) run(ctx context.Context) {
	t := time.NewTicker(completionPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		ids := make([]string, 0, len(c.waiting))
		for id := range c.waiting {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		rows, err := c.db.Query(ctx, `SELECT job_id FROM jobs WHERE job_id = ANY($1) AND completed_at IS NOT NULL`, ids)
		if err != nil {
			continue // the next tick asks again
		}
		var done []string
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				done = append(done, id)
			}
		}
		rows.Close()
		c.mu.Lock()
		for _, id := range done {
			if ch, ok := c.waiting[id]; ok {
				close(ch)
				delete(c.waiting, id)
			}
		}
		c.mu.Unlock()
	}
}
