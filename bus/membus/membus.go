// Package membus is an in-memory implementation of package bus, for tests and
// the worker SDK's contract kit: code under test gets a bus with no database
// or broker that passes the same conformance suite (package bustest) as pgbus
// and sbbus, so it meets the queues, topics and correlation filters,
// peek-lock settlement, lock expiry, delivery counts, time to live, scheduled
// enqueue, duplicate detection and dead-letter queues of production.
//
// A Bus lives in one process and is its own namespace: two Buses share
// nothing, and nothing survives Close or the process. Production processes
// open their bus with package busconfig, which never selects this one.
//
// All state sits behind one mutex. A receiver with nothing to take waits on
// its entity's change channel, closed by sends, abandons and dead-lettering,
// and on a timer for the next lock expiry or scheduled message there; it
// never polls. Where the production buses may differ, membus does as pgbus
// does:
//
//   - Messages past their time to live, and messages whose lock expired on
//     their last allowed delivery, are dead-lettered or dropped when a
//     receiver of their queue or subscription (not of its dead-letter queue)
//     next receives, as in Service Bus.
//   - A message's TTL is capped by its entity's default TTL and counts from
//     its scheduled enqueue time if it has one.
//   - Priority orders waiting messages as bus.PriorityHeadStart describes
//     (Service Bus, and so sbbus, ignores it).
//   - Sequence numbers come from one counter for all entities: unique and
//     growing per entity, with gaps.
//   - Any receiver of a path settles a message with its sequence number and
//     lock token (Service Bus needs the receiver that received it).
//   - Entity names follow pgbus's (Service Bus's) rules.
//
// It reports the metrics and spans of package bustel with messaging.system
// "lucius_membus", except the queue depth gauges.
package membus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// Config configures a Bus. The zero value is ready to use.
type Config struct {
	// MeterProvider and TracerProvider receive the bus's metrics (bustel.Metric*
	// names, without the depth gauges) and its send and receive spans.
	// Default: the OpenTelemetry globals.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Propagator writes trace context into the application properties of
	// messages sent and reads it from those received. Default: the
	// OpenTelemetry global.
	Propagator propagation.TextMapPropagator
}

// Bus is a bus.Bus in memory.
type Bus struct {
	tel  *bustel.Instruments
	done chan struct{} // closed by Close, under mu

	mu     sync.Mutex
	seq    int64
	queues map[string]*queue
	topics map[string]*topic
}

var _ bus.Bus = (*Bus)(nil)

// New returns an empty Bus.
func New(cfg Config) (*Bus, error) {
	tel, err := bustel.New(bustel.Config{
		System:         "lucius_membus",
		MeterProvider:  cfg.MeterProvider,
		TracerProvider: cfg.TracerProvider,
		Propagator:     cfg.Propagator,
	})
	if err != nil {
		return nil, fmt.Errorf("membus: %w", err)
	}
	return &Bus{tel: tel, done: make(chan struct{}), queues: map[string]*queue{}, topics: map[string]*topic{}}, nil
}

// TxPublisher is nil: the messages live in no database, so a producer
// publishes after its commit, as with Service Bus.
func (b *Bus) TxPublisher() bus.TxPublisher { return nil }

// Close drops every entity and message. Senders and receivers return
// bus.ErrClosed afterwards, and waiting receives return at once. Closing twice
// is harmless.
func (b *Bus) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return nil
	}
	close(b.done)
	b.queues, b.topics = nil, nil
	return nil
}

func (b *Bus) closed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// checkOptions refuses negative durations and delivery counts, as pgbus does.
func checkOptions(maxDeliveries int, durations map[string]time.Duration) error {
	var errs []error
	for what, d := range durations {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", what, d))
		}
	}
	if maxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("max delivery count %d is negative", maxDeliveries))
	}
	return errors.Join(errs...)
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// EnsureQueue creates the queue or updates its options.
func (b *Bus) EnsureQueue(_ context.Context, name string, opts bus.QueueOptions) error {
	err := errors.Join(bus.CheckEntityName(name), checkOptions(opts.MaxDeliveryCount, map[string]time.Duration{
		"lock duration": opts.LockDuration, "default TTL": opts.DefaultTTL,
		"duplicate detection window": opts.DuplicateDetectionWindow,
	}))
	if err != nil {
		return fmt.Errorf("membus: ensure queue %s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return fmt.Errorf("membus: ensure queue %s: %w", name, bus.ErrClosed)
	}
	if _, ok := b.topics[name]; ok {
		return fmt.Errorf("membus: ensure queue %s: a topic has that name", name)
	}
	q := b.queues[name]
	if q == nil {
		q = &queue{e: newEntity(), dup: dedup{seen: map[string]time.Time{}}}
		b.queues[name] = q
	}
	q.e.lockDuration = orDefault(opts.LockDuration, bus.DefaultLockDuration)
	q.e.maxDeliveries = orDefault(opts.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)
	q.e.ttl = orDefault(opts.DefaultTTL, bus.DefaultTTL)
	q.e.deadLetterOnExpiration = opts.DeadLetterOnExpiration
	q.dup.window = orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)
	return nil
}

// EnsureTopic creates the topic or updates its options.
func (b *Bus) EnsureTopic(_ context.Context, name string, opts bus.TopicOptions) error {
	err := errors.Join(bus.CheckEntityName(name), checkOptions(0, map[string]time.Duration{
		"default TTL": opts.DefaultTTL, "duplicate detection window": opts.DuplicateDetectionWindow,
	}))
	if err != nil {
		return fmt.Errorf("membus: ensure topic %s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return fmt.Errorf("membus: ensure topic %s: %w", name, bus.ErrClosed)
	}
	if _, ok := b.queues[name]; ok {
		return fmt.Errorf("membus: ensure topic %s: a queue has that name", name)
	}
	t := b.topics[name]
	if t == nil {
		t = &topic{dup: dedup{seen: map[string]time.Time{}}, subs: map[string]*entity{}}
		b.topics[name] = t
	}
	t.ttl = orDefault(opts.DefaultTTL, bus.DefaultTTL)
	t.dup.window = orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)
	return nil
}

// EnsureSubscription creates the subscription or updates its options and
// filter, which apply to messages sent afterwards. The topic must exist (else
// bus.ErrNotFound).
func (b *Bus) EnsureSubscription(_ context.Context, topicName, name string, opts bus.SubscriptionOptions) error {
	path := bus.SubscriptionSource(topicName, name).Path()
	err := errors.Join(bus.CheckEntityName(topicName), bus.CheckSubscriptionName(name),
		checkOptions(opts.MaxDeliveryCount, map[string]time.Duration{
			"lock duration": opts.LockDuration, "default TTL": opts.DefaultTTL,
		}))
	if err != nil {
		return fmt.Errorf("membus: ensure subscription %s: %w", path, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return fmt.Errorf("membus: ensure subscription %s: %w", path, bus.ErrClosed)
	}
	t := b.topics[topicName]
	if t == nil {
		return fmt.Errorf("membus: ensure subscription %s: topic %s: %w", path, topicName, bus.ErrNotFound)
	}
	s := t.subs[name]
	if s == nil {
		s = newEntity()
		t.subs[name] = s
	}
	s.lockDuration = orDefault(opts.LockDuration, bus.DefaultLockDuration)
	s.maxDeliveries = orDefault(opts.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)
	s.ttl = opts.DefaultTTL
	s.deadLetterOnExpiration = opts.DeadLetterOnExpiration
	s.filter = maps.Clone(opts.Filter)
	return nil
}

// NewSender returns a sender to the queue or topic entity, which must exist.
func (b *Bus) NewSender(_ context.Context, entity string) (bus.Sender, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return nil, fmt.Errorf("membus: new sender %s: %w", entity, bus.ErrClosed)
	}
	if b.queues[entity] == nil && b.topics[entity] == nil {
		return nil, fmt.Errorf("membus: new sender %s: %w", entity, bus.ErrNotFound)
	}
	return &sender{b: b, entity: entity, done: make(chan struct{})}, nil
}

// sender publishes to one queue or topic.
type sender struct {
	b      *Bus
	entity string
	done   chan struct{}
	once   sync.Once
}

// Send publishes msgs: all of them or, if one is invalid, none.
func (s *sender) Send(ctx context.Context, msgs ...bus.Message) error {
	select {
	case <-s.done:
		return fmt.Errorf("membus: send to %s: %w", s.entity, bus.ErrClosed)
	default:
	}
	ctx, span, msgs := s.b.tel.StartSend(ctx, s.entity, msgs)
	err := s.b.send(s.entity, msgs)
	bustel.EndSpan(span, err)
	if err != nil {
		return err
	}
	s.b.tel.Sent(ctx, s.entity, len(msgs))
	return nil
}

// Close stops the sender; Send returns bus.ErrClosed afterwards.
func (s *sender) Close(context.Context) error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// send enqueues msgs to the queue, or to each subscription of the topic whose
// filter they match, dropping duplicates, and wakes the receivers.
func (b *Bus) send(name string, msgs []bus.Message) error {
	// Checked and copied before anything is enqueued, so a bad message
	// leaves the batch unsent and the caller's buffers stay the caller's.
	own := make([]bus.Message, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			return fmt.Errorf("membus: send to %s: message %d has no ID", name, i)
		}
		if m.TTL < 0 {
			return fmt.Errorf("membus: send to %s: message %s: TTL %v is negative", name, m.ID, m.TTL)
		}
		m.Body, m.Properties = bytes.Clone(m.Body), maps.Clone(m.Properties)
		own[i] = m
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return fmt.Errorf("membus: send to %s: %w", name, bus.ErrClosed)
	}
	got := map[*entity]bool{}
	if q := b.queues[name]; q != nil {
		for _, m := range own {
			if q.dup.fresh(m.ID, now) {
				b.seq++
				q.e.enqueue(b.seq, m, now, q.e.ttl)
				got[q.e] = true
			}
		}
	} else if t := b.topics[name]; t != nil {
		for _, m := range own {
			if !t.dup.fresh(m.ID, now) {
				continue
			}
			for _, s := range t.subs {
				if s.matches(m.Properties) {
					b.seq++
					s.enqueue(b.seq, m, now, orDefault(s.ttl, t.ttl))
					got[s] = true
				}
			}
		}
	} else {
		return fmt.Errorf("membus: send to %s: %w", name, bus.ErrNotFound)
	}
	for e := range got {
		e.notify()
	}
	return nil
}

// NewReceiver returns a receiver of src, whose queue or subscription must
// exist.
func (b *Bus) NewReceiver(ctx context.Context, src bus.Source) (bus.Receiver, error) {
	path := src.Path()
	if (src.Queue == "") == (src.Topic == "") || (src.Topic != "") != (src.Subscription != "") {
		return nil, fmt.Errorf("membus: new receiver %q: name either a queue or a topic and subscription", path)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed() {
		return nil, fmt.Errorf("membus: new receiver %s: %w", path, bus.ErrClosed)
	}
	var e *entity
	if q := b.queues[src.Queue]; q != nil {
		e = q.e
	} else if t := b.topics[src.Topic]; t != nil {
		e = t.subs[src.Subscription]
	}
	if e == nil {
		return nil, fmt.Errorf("membus: new receiver %s: %w", path, bus.ErrNotFound)
	}
	b.tel.Receiving(ctx, path)
	return &receiver{b: b, e: e, path: path, dlq: src.DeadLetter, done: make(chan struct{})}, nil
}
