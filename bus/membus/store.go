package membus

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/lucius-platform/lucius/bus"
)

// queue is a queue: an entity that is sent to directly.
type queue struct {
	e   *entity
	dup dedup
}

// topic copies what is sent to it to its subscriptions.
type topic struct {
	ttl  time.Duration
	dup  dedup
	subs map[string]*entity
}

// entity is a queue or a subscription: what receivers read, with its
// dead-letter queue. Its fields are guarded by Bus.mu.
type entity struct {
	lockDuration  time.Duration
	maxDeliveries int
	// ttl is the default time to live; for a subscription 0 means the topic's.
	ttl                    time.Duration
	deadLetterOnExpiration bool
	filter                 map[string]string // subscriptions only

	live, dead map[int64]*message // by sequence number
	// changed is closed, and replaced, whenever a message of live or dead
	// becomes receivable, so receivers of either wait on it without polling.
	changed chan struct{}
}

func newEntity() *entity {
	return &entity{live: map[int64]*message{}, dead: map[int64]*message{}, changed: make(chan struct{})}
}

// messages is e's live queue, or its dead-letter queue when dlq is set.
func (e *entity) messages(dlq bool) map[int64]*message {
	if dlq {
		return e.dead
	}
	return e.live
}

func (e *entity) notify() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// matches reports whether the correlation filter takes a message with props.
func (e *entity) matches(props map[string]string) bool {
	for k, want := range e.filter {
		if got, ok := props[k]; !ok || got != want {
			return false
		}
	}
	return true
}

// message is one receivable copy of a sent message.
type message struct {
	bus.Message // as sent; Body and Properties belong to the bus
	seq         int64
	enqueuedAt  time.Time // the send, or the scheduled time if later
	expiresAt   time.Time
	// order is the place in line: the enqueue time less the priority's head
	// start, and in a dead-letter queue the time it was dead-lettered.
	order       time.Time
	deliveries  int
	lockToken   string // of the latest delivery; "" when released
	lockedUntil time.Time
	reason      string // dead-letter reason and description
	description string
}

func (m *message) locked(now time.Time) bool { return m.lockToken != "" && now.Before(m.lockedUntil) }

// received is the delivery of m that a receiver returns. Body and Properties
// are copies, so a caller that changes them changes nothing in the bus.
func (m *message) received() *bus.Received {
	r := &bus.Received{
		Message: bus.Message{
			ID:            m.ID,
			Body:          bytes.Clone(m.Body),
			ContentType:   m.ContentType,
			Key:           m.Key,
			CorrelationID: m.CorrelationID,
			Subject:       m.Subject,
			TTL:           m.expiresAt.Sub(m.enqueuedAt),
		},
		SequenceNumber:        m.seq,
		DeliveryCount:         m.deliveries,
		EnqueuedAt:            m.enqueuedAt,
		LockedUntil:           m.lockedUntil,
		DeadLetterReason:      m.reason,
		DeadLetterDescription: m.description,
		LockToken:             m.lockToken,
	}
	if len(m.Properties) > 0 {
		r.Properties = maps.Clone(m.Properties)
	}
	return r
}

// enqueue adds a copy of msg. As in pgbus, a message's TTL is capped by the
// entity's default ttl and counts from its (scheduled) enqueue time, and a
// scheduled message gets no head start before its time.
func (e *entity) enqueue(seq int64, msg bus.Message, now time.Time, ttl time.Duration) {
	at := now
	if msg.ScheduledAt.After(now) {
		at = msg.ScheduledAt
	}
	if msg.TTL > 0 {
		ttl = min(msg.TTL, ttl)
	}
	headStart := time.Duration(bus.ClampPriority(msg.Priority)) * bus.PriorityHeadStart
	e.live[seq] = &message{Message: msg, seq: seq, enqueuedAt: at, expiresAt: at.Add(ttl), order: at.Add(-headStart)}
}

// deadLetter moves m from live to dead with reason and description.
func (e *entity) deadLetter(m *message, now time.Time, reason, description string) {
	delete(e.live, m.seq)
	m.lockToken, m.lockedUntil = "", time.Time{}
	m.reason, m.description, m.order = reason, description, now
	e.dead[m.seq] = m
}

func (e *entity) maxDeliveriesExceeded(m *message, now time.Time) {
	e.deadLetter(m, now, bus.ReasonMaxDeliveryCountExceeded,
		fmt.Sprintf("Message could not be consumed after %d delivery attempts.", e.maxDeliveries))
}

// swept counts what a take removed from the live queue instead of delivering.
type swept struct{ ttl, maxDelivered, dropped int64 }

// take locks up to limit receivable messages of the live queue, or of the
// dead-letter queue when dlq is set, first in line first. From the live queue
// it first takes out what is due but expired (dead-lettered or dropped) or
// out of deliveries (its lock expired on the last one): as in Service Bus,
// that happens when a receiver of the entity pulls, not on a timer. When it
// locks nothing, next is when a lock expires or a scheduled message falls
// due, the earliest time another take could find something (zero: none).
func (e *entity) take(now time.Time, dlq bool, limit int) (got []*bus.Received, next time.Time, sw swept) {
	msgs := e.messages(dlq)
	var ready []*message
	for _, m := range msgs {
		switch {
		case m.locked(now):
			next = earliest(next, m.lockedUntil)
		case now.Before(m.enqueuedAt):
			next = earliest(next, m.enqueuedAt)
		case dlq: // dead-lettered messages neither expire nor run out of deliveries
			ready = append(ready, m)
		case !now.Before(m.expiresAt) && e.deadLetterOnExpiration:
			e.deadLetter(m, now, bus.ReasonTTLExpired, "The message expired and was dead lettered.")
			sw.ttl++
		case !now.Before(m.expiresAt):
			delete(e.live, m.seq)
			sw.dropped++
		case m.deliveries >= e.maxDeliveries:
			e.maxDeliveriesExceeded(m, now)
			sw.maxDelivered++
		default:
			ready = append(ready, m)
		}
	}
	if sw.ttl+sw.maxDelivered > 0 {
		e.notify() // wake the dead-letter queue's receivers
	}
	slices.SortFunc(ready, func(a, b *message) int {
		return cmp.Or(a.order.Compare(b.order), cmp.Compare(a.seq, b.seq))
	})
	for _, m := range ready[:min(limit, len(ready))] {
		m.deliveries++
		m.lockToken = uuid.NewString()
		m.lockedUntil = now.Add(e.lockDuration)
		got = append(got, m.received())
	}
	return got, next, sw
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// dedup remembers the ids sent to a queue or topic within its duplicate
// detection window.
type dedup struct {
	window  time.Duration
	seen    map[string]time.Time // id → when a re-send stops being a duplicate
	purgeAt time.Time
}

// fresh reports whether id is not a duplicate, and records it if so.
func (d *dedup) fresh(id string, now time.Time) bool {
	if !now.Before(d.purgeAt) {
		// Forget expired ids once a window, so the map holds about one
		// window's sends rather than every id ever sent.
		maps.DeleteFunc(d.seen, func(_ string, until time.Time) bool { return !now.Before(until) })
		d.purgeAt = now.Add(d.window)
	}
	if until, ok := d.seen[id]; ok && now.Before(until) {
		return false
	}
	d.seen[id] = now.Add(d.window)
	return true
}
