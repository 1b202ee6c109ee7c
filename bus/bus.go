// Package bus is Lucius's message transport, shaped on Azure Service Bus
// semantics so the production adapter (Azure Service Bus) and the embedded default
// (PostgreSQL, package pgbus) behave alike. Every implementation passes the same
// conformance suite, package bustest.
//
// Entities are queues and topics. A topic copies each message to every
// subscription whose filter matches the message's application properties; a
// subscription is then received from like a queue. Receiving is peek-lock: a
// received message is hidden from other receivers until its lock expires, and its
// receiver settles it exactly once:
//
//   - Complete removes it.
//   - Abandon releases the lock; the message is delivered again at once.
//   - DeadLetter moves it to the entity's dead-letter queue with a reason.
//   - RenewLock extends the lock while work is still running.
//
// A lock that expires unsettled makes the message deliverable again; settling it
// afterwards fails with ErrLockLost. Each delivery increments DeliveryCount; a
// message whose count reached the entity's MaxDeliveryCount is dead-lettered
// (reason MaxDeliveryCountExceeded) instead of being delivered again. Messages
// past their time to live are dead-lettered (reason TTLExpiredException) when the
// entity has DeadLetterOnExpiration, and dropped otherwise. A message whose ID was
// already sent to the same entity within the entity's DuplicateDetectionWindow is
// dropped silently, which is what makes outbox re-sends safe.//
// This package is the root of module bus, which workers import without the
// control plane: the interface, its conformance suite (bustest), both
// production implementations (pgbus, sbbus) and an in-memory one for tests
// (membus), the factory that opens the one LUCIUS_BUS names (busconfig), and
// the entities every process declares (topology, routing).
package bus

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reasons a message was dead-lettered by the bus itself (Service Bus's own strings).
const (
	ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"
	ReasonTTLExpired               = "TTLExpiredException"
)

// Errors every implementation returns (wrapped) for these conditions.
var (
	// ErrLockLost: the message's lock expired or it was settled already.
	ErrLockLost = errors.New("bus: message lock lost")
	// ErrNotFound: the queue, topic or subscription does not exist.
	ErrNotFound = errors.New("bus: entity not found")
	// ErrClosed: the sender, receiver or bus was closed.
	ErrClosed = errors.New("bus: closed")
)

// Message is what a sender publishes.
type Message struct {
	// ID is the message id used for duplicate detection. Required.
	ID string
	// Body is opaque bytes; Lucius sends protojson with ContentType application/json.
	Body        []byte
	ContentType string
	// Properties are the application properties subscription filters match on.
	Properties map[string]string
	// Key is the partition (ordering) key, e.g. the routing key of a directive.
	Key string
	// CorrelationID and Subject are carried as in Service Bus.
	CorrelationID string
	Subject       string
	// ScheduledAt delays delivery until that time (scheduled enqueue). Zero: now.
	ScheduledAt time.Time
	// TTL overrides the entity's default time to live. Zero: entity default.
	TTL time.Duration
	// Priority (0 to MaxPriority) orders a message among those waiting to be
	// received: see PriorityHeadStart. Set on send only (a received message
	// does not report it). Service Bus has no message priority: package
	// sbbus ignores it and delivers in enqueue order, so on Service Bus
	// priority orders only what waits in the ledger's outbox.
	Priority int
}

// Received is a delivered, locked message.
type Received struct {
	Message
	// SequenceNumber is unique per entity and grows with enqueue order.
	SequenceNumber int64
	// DeliveryCount is 1 on the first delivery.
	DeliveryCount int
	EnqueuedAt    time.Time
	// LockedUntil is when the lock expires unless renewed.
	LockedUntil time.Time
	// DeadLetterReason and DeadLetterDescription are set on messages received
	// from a dead-letter queue.
	DeadLetterReason      string
	DeadLetterDescription string
	// LockToken identifies this delivery. Implementations keep what else they
	// need to settle the message in Handle.
	LockToken string
	Handle    any
}

// QueueOptions configure a queue. Zero values take the defaults noted.
type QueueOptions struct {
	LockDuration             time.Duration // default 60s
	MaxDeliveryCount         int           // default 10
	DefaultTTL               time.Duration // default 14 days
	DeadLetterOnExpiration   bool
	DuplicateDetectionWindow time.Duration // default 10 minutes
}

// TopicOptions configure a topic.
type TopicOptions struct {
	DefaultTTL               time.Duration // default 14 days
	DuplicateDetectionWindow time.Duration // default 10 minutes
}

// SubscriptionOptions configure a subscription of a topic.
type SubscriptionOptions struct {
	LockDuration           time.Duration // default 60s
	MaxDeliveryCount       int           // default 10
	DefaultTTL             time.Duration // default: the topic's
	DeadLetterOnExpiration bool
	// Filter is a correlation filter: the subscription receives a message when
	// every key here is present in the message's Properties with the same value.
	// An empty filter receives everything.
	Filter map[string]string
}

// Priorities run from 0 (the default) to MaxPriority. A message of priority
// p is ordered as if it had been enqueued p × PriorityHeadStart earlier: among
// messages waiting together, higher priority goes first, yet a priority-0
// message waits at most MaxPriority × PriorityHeadStart (60 s) behind
// messages enqueued after it, so nothing starves. A scheduled message is
// never delivered before its time. The ledger's outbox orders its messages
// by the same rule.
const (
	MaxPriority       = 10
	PriorityHeadStart = 6 * time.Second
)

// ClampPriority brings p into 0..MaxPriority.
func ClampPriority(p int) int { return min(max(p, 0), MaxPriority) }

// Defaults applied by implementations to zero-valued options.
const (
	DefaultLockDuration       = 60 * time.Second
	DefaultMaxDeliveryCount   = 10
	DefaultTTL                = 14 * 24 * time.Hour
	DefaultDuplicateDetection = 10 * time.Minute
)

// Source names what a receiver reads: a queue, or a topic's subscription, or the
// dead-letter queue of either.
type Source struct {
	Queue        string
	Topic        string
	Subscription string
	DeadLetter   bool
}

// QueueSource reads a queue.
func QueueSource(queue string) Source { return Source{Queue: queue} }

// SubscriptionSource reads a subscription of a topic.
func SubscriptionSource(topic, subscription string) Source {
	return Source{Topic: topic, Subscription: subscription}
}

// DeadLetterQueue reads the dead-letter queue of s.
func (s Source) DeadLetterQueue() Source { s.DeadLetter = true; return s }

// Path is the entity path in Service Bus notation: "queue",
// "topic/subscriptions/sub", with "/$deadletterqueue" appended for DLQs.
func (s Source) Path() string {
	p := s.Queue
	if s.Topic != "" {
		p = s.Topic + "/subscriptions/" + s.Subscription
	}
	if s.DeadLetter {
		p += "/$deadletterqueue"
	}
	return p
}

func (s Source) String() string { return s.Path() }

// Admin declares entities. Every call is idempotent: declaring an existing entity
// updates its options.
type Admin interface {
	EnsureQueue(ctx context.Context, name string, opts QueueOptions) error
	EnsureTopic(ctx context.Context, name string, opts TopicOptions) error
	EnsureSubscription(ctx context.Context, topic, name string, opts SubscriptionOptions) error
}

// Bus is a connection to a message bus.
type Bus interface {
	Admin
	// NewSender sends to a queue or topic.
	NewSender(ctx context.Context, entity string) (Sender, error)
	// NewReceiver receives from a queue, a subscription, or a dead-letter queue.
	NewReceiver(ctx context.Context, src Source) (Receiver, error)
	// TxPublisher returns the bus's capability to publish inside a producer's
	// database transaction, or nil when it has none (Azure Service Bus).
	TxPublisher() TxPublisher
	// Close releases the bus's resources; senders and receivers stop working.
	Close(ctx context.Context) error
}

// Sender publishes messages to one entity.
type Sender interface {
	// Send publishes the messages as one batch: all are accepted or none.
	// Messages whose ID is a duplicate within the detection window are dropped.
	Send(ctx context.Context, msgs ...Message) error
	Close(ctx context.Context) error
}

// Receiver takes messages from one source with peek-lock.
type Receiver interface {
	// Receive waits until at least one message is available, or ctx ends (then
	// it returns ctx's error), and returns up to max locked messages.
	Receive(ctx context.Context, max int) ([]*Received, error)
	Complete(ctx context.Context, m *Received) error
	Abandon(ctx context.Context, m *Received) error
	DeadLetter(ctx context.Context, m *Received, reason, description string) error
	// RenewLock extends the message's lock by the entity's lock duration.
	RenewLock(ctx context.Context, m *Received) (time.Time, error)
	Close(ctx context.Context) error
}

// TxPublisher is an optional capability of a Bus whose messages live in a
// PostgreSQL database (package pgbus has it; Azure Service Bus cannot): it
// sends with a transaction the caller holds, so the messages commit or roll
// back with the caller's own writes. The outbox dispatcher uses it to publish
// rows and mark them sent in one commit. Every Bus says whether it has it,
// through the interface, never by a type assertion:
//
//	if tp := b.TxPublisher(); tp != nil && tp.InDatabase(pool) {
//		// send with tp.SendInTx inside transactions begun on pool
//	}
//
// A Bus without it (TxPublisher returns nil) is published to after the
// producer's commit; message ids make a re-send after a crash harmless
// (duplicate detection).
type TxPublisher interface {
	// InDatabase reports whether the bus's messages live in the database pool
	// connects to, so SendInTx accepts transactions begun on pool.
	InDatabase(pool *pgxpool.Pool) bool
	// SendInTx sends msgs to the queue or topic entity with tx, a transaction
	// on the bus's database, as Sender.Send would: they become visible when tx
	// commits and are gone if it rolls back. Call announce after the commit to
	// wake the receivers (until then they find the messages by polling).
	SendInTx(ctx context.Context, tx pgx.Tx, entity string, msgs ...Message) (announce func(), err error)
}

// PropertiesCarrier lets OpenTelemetry propagators read and write trace context
// (traceparent, tracestate, baggage) in a message's application properties. It
// satisfies go.opentelemetry.io/otel/propagation.TextMapCarrier.
type PropertiesCarrier map[string]string

// Get returns the value stored for key.
func (c PropertiesCarrier) Get(key string) string { return c[key] }

// Set stores a value.
func (c PropertiesCarrier) Set(key, value string) { c[key] = value }

// Keys lists the stored keys.
func (c PropertiesCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
