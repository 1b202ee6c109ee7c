package pgbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
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
	ctx, span, msgs := s.b.tel.StartSend(ctx, s.entity, msgs)
	paths, err := send(ctx, s.b.pool, s.entity, msgs)
	bustel.EndSpan(span, err)
	if err != nil {
		return err
	}
	s.b.tel.Sent(ctx, s.entity, len(msgs))
	s.b.announce(paths)
	return nil
}

// SendInTx publishes msgs to entity with tx, a transaction on the Bus's
// database (see InDatabase): they become visible when tx commits, and are
// gone if it rolls back. After the commit, call announce to wake their
// receivers (and count them in bustel.MetricSent). It implements bus.TxPublisher.
func (b *Bus) SendInTx(ctx context.Context, tx pgx.Tx, entity string, msgs ...bus.Message) (announce func(), err error) {
	if b.closed() {
		return nil, fmt.Errorf("send to %s: %w", entity, bus.ErrClosed)
	}
	ctx, span, msgs := b.tel.StartSend(ctx, entity, msgs)
	paths, err := send(ctx, tx, entity, msgs)
	bustel.EndSpan(span, err)
	if err != nil {
		return nil, err
	}
	n := len(msgs)
	return func() {
		b.tel.Sent(context.WithoutCancel(ctx), entity, n)
		b.announce(paths)
	}, nil
}

// InDatabase reports whether pool connects to the Bus's database (the same
// host, port and database as the Bus's pool), so that SendInTx accepts
// transactions begun on it. It implements bus.TxPublisher.
func (b *Bus) InDatabase(pool *pgxpool.Pool) bool {
	if pool == nil {
		return false
	}
	if pool == b.pool {
		return true
	}
	mine, theirs := b.pool.Config().ConnConfig, pool.Config().ConnConfig
	return mine.Host == theirs.Host && mine.Port == theirs.Port && mine.Database == theirs.Database
}

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
		priority  = make([]int16, n)
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
		priority[i] = int16(bus.ClampPriority(m.Priority))
	}
	var (
		exists bool
		paths  []string
	)
	err := q.QueryRow(ctx, qSend, entity, ids, bodies, types, props, keys,
		corrIDs, subjects, scheduled, ttls, priority, bus.PriorityHeadStart.Microseconds()).Scan(&exists, &paths)
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
