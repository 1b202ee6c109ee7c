package pgbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgtype"

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
	if len(msgs) == 0 {
		return nil
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
			return fmt.Errorf("send to %s: message %d has no ID", s.entity, i)
		}
		if m.TTL < 0 {
			return fmt.Errorf("send to %s: message %s: TTL %v is negative", s.entity, m.ID, m.TTL)
		}
		p := m.Properties
		if p == nil {
			p = map[string]string{}
		}
		pj, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("send to %s: message %s: properties: %w", s.entity, m.ID, err)
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
	err := s.b.pool.QueryRow(ctx, qSend, s.entity, ids, bodies, types, props, keys,
		corrIDs, subjects, scheduled, ttls).Scan(&exists, &paths)
	if err != nil {
		return fmt.Errorf("send to %s: %w", s.entity, err)
	}
	if !exists {
		return fmt.Errorf("send to %s: %w", s.entity, bus.ErrNotFound)
	}
	s.b.announce(paths)
	return nil
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
