package pgbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/core/bus"
)

// sender publishes to one queue or topic.
type sender struct {
	b      *Bus
	entity string
	done   chan struct{}
	once   sync.Once
}

// Send publishes msgs in one statement (all or none), then wakes receivers of
// the paths that got messages.
func (s *sender) Send(ctx context.Context, msgs ...bus.Message) error {
	if s.isClosed() {
		return fmt.Errorf("send to %s: %w", s.entity, bus.ErrClosed)
	}
	paths, err := send(ctx, s.b.pool, s.entity, msgs)
	if err != nil {
		return err
	}
	s.b.announce(paths)
	return nil
}

// SendInTx publishes msgs to entity with tx, a transaction on the Bus's
// database (see Pool): they become visible when tx commits, and are gone if
// it rolls back. After the commit, call announce to wake their receivers.
func (b *Bus) SendInTx(ctx context.Context, tx pgx.Tx, entity string, msgs ...bus.Message) (announce func(), err error) {
	if b.closed() {
		return nil, fmt.Errorf("send to %s: %w", entity, bus.ErrClosed)
	}
	paths, err := send(ctx, tx, entity, msgs)
	if err != nil {
		return nil, err
	}
	return func() { b.announce(paths) }, nil
}

// Pool is the pool the Bus works on, for SendInTx's callers to check that
// their transaction is on the same database.
func (b *Bus) Pool() *pgxpool.Pool { return b.pool }

// send runs qSend on q and returns the paths that got messages.
func send(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, entity string, msgs []bus.Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	n := len(msgs)
	var (
		ids       = make([]string, n)
		bodies    = make([][]byte, n)
		types     = make([]string, n)
		props     = make([]string, n)
		keys      = make([]string, n)
		corrIDs   = make([]string, n)
		subjects  = make([]string, n)
		scheduled = make([]pgtype.Timestamptz, n)
		ttls      = make([]int64, n)
	)
	for i, m := range msgs {
		if m.ID == "" {
			return nil, fmt.Errorf("send to %s: message %d has no ID", entity, i)
		}
		if m.TTL < 0 {
			return nil, fmt.Errorf("send to %s: message %s: TTL %v is negative", entity, m.ID, m.TTL)
		}
		p := m.Properties
		if p == nil {
			p = map[string]string{}
		}
		pj, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("send to %s: message %s: properties: %w", entity, m.ID, err)
		}
		ids[i], bodies[i], types[i], props[i] = m.ID, m.Body, m.ContentType, string(pj)
		keys[i], corrIDs[i], subjects[i] = m.Key, m.CorrelationID, m.Subject
		scheduled[i] = pgtype.Timestamptz{Time: m.ScheduledAt, Valid: !m.ScheduledAt.IsZero()}
		ttls[i] = m.TTL.Microseconds()
	}
	var (
		exists bool
		paths  []string
	)
	err := q.QueryRow(ctx, qSend, entity, ids, bodies, types, props, keys,
		corrIDs, subjects, scheduled, ttls).Scan(&exists, &paths)
	if err != nil {
		return nil, fmt.Errorf("send to %s: %w", entity, err)
	}
	if !exists {
		return nil, fmt.Errorf("send to %s: %w", entity, bus.ErrNotFound)
	}
	return paths, nil
}

// Close stops the sender; Send returns bus.ErrClosed afterwards.
func (s *sender) Close(context.Context) error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *sender) isClosed() bool {
	select {
	case <-s.done:
		return true
	case <-s.b.done:
		return true
	default:
		return false
	}
}
