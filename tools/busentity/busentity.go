// Package busentity records the bus entities Lucius declares (package
// bus/topology) without a bus, so files that describe them for other tools,
// the Service Bus emulator's config (tools/sbemulator) and the Bicep template
// (tools/bicep), come from the same declaration the processes run.
package busentity

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/topology"
)

// Set is every entity of a topology, each list in declaration order. Options
// carry the defaults Azure Service Bus (bus/sbbus) applies to zero values,
// except a subscription's DefaultTTL, which stays zero for "the topic's".
type Set struct {
	Queues        []Queue
	Topics        []Topic
	Subscriptions []Subscription
}

// Queue is a declared queue.
type Queue struct {
	Name    string
	Options bus.QueueOptions
}

// Topic is a declared topic.
type Topic struct {
	Name    string
	Options bus.TopicOptions
}

// Subscription is a declared subscription of Topic.
type Subscription struct {
	Topic   string
	Name    string
	Options bus.SubscriptionOptions
}

// Record returns the entities topology.Declare declares for cfg. A second
// declaration of an entity updates its options in place, as on a real bus.
func Record(cfg topology.Config) (Set, error) {
	r := &recorder{}
	if err := topology.Declare(context.Background(), r, cfg); err != nil {
		return Set{}, err
	}
	return r.set, nil
}

// SubscriptionsOf lists the subscriptions of topic, in declaration order.
func (s Set) SubscriptionsOf(topic string) []Subscription {
	var out []Subscription
	for _, sub := range s.Subscriptions {
		if sub.Topic == topic {
			out = append(out, sub)
		}
	}
	return out
}

// recorder is a bus.Admin that records declarations instead of making them.
type recorder struct{ set Set }

func (r *recorder) EnsureQueue(_ context.Context, name string, o bus.QueueOptions) error {
	o.LockDuration = or(o.LockDuration, bus.DefaultLockDuration)
	o.MaxDeliveryCount = or(o.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)
	o.DefaultTTL = or(o.DefaultTTL, bus.DefaultTTL)
	o.DuplicateDetectionWindow = or(o.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)
	r.set.Queues = upsert(r.set.Queues, Queue{Name: name, Options: o}, func(q Queue) bool { return q.Name == name })
	return nil
}

func (r *recorder) EnsureTopic(_ context.Context, name string, o bus.TopicOptions) error {
	o.DefaultTTL = or(o.DefaultTTL, bus.DefaultTTL)
	o.DuplicateDetectionWindow = or(o.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)
	r.set.Topics = upsert(r.set.Topics, Topic{Name: name, Options: o}, func(t Topic) bool { return t.Name == name })
	return nil
}

func (r *recorder) EnsureSubscription(_ context.Context, topic, name string, o bus.SubscriptionOptions) error {
	declared := false
	for _, t := range r.set.Topics {
		declared = declared || t.Name == topic
	}
	if !declared {
		return fmt.Errorf("subscription %s of undeclared topic %s", name, topic)
	}
	o.LockDuration = or(o.LockDuration, bus.DefaultLockDuration)
	o.MaxDeliveryCount = or(o.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)
	o.Filter = maps.Clone(o.Filter)
	r.set.Subscriptions = upsert(r.set.Subscriptions, Subscription{Topic: topic, Name: name, Options: o},
		func(s Subscription) bool { return s.Topic == topic && s.Name == name })
	return nil
}

// upsert replaces the first element that is e's entity, or appends e.
func upsert[E any](list []E, e E, same func(E) bool) []E {
	for i := range list {
		if same(list[i]) {
			list[i] = e
			return list
		}
	}
	return append(list, e)
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ISODuration formats d as an ISO 8601 duration, the form Service Bus entity
// properties take: PT1M, PT5M, P1D, P14D, P1DT2H30M, PT1.5S.
func ISODuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteByte('P')
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dD", days)
		d -= days * 24 * time.Hour
	}
	if d == 0 {
		return b.String()
	}
	b.WriteByte('T')
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteByte('S')
	}
	return b.String()
}
