// Package sbemulator renders the Azure Service Bus emulator's entity file
// (Config.json) from the same topology declaration every Lucius process runs, so
// the production transport's local stand-in has exactly the entities Lucius
// declares.
package sbemulator

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/topology"
)

// Render returns the emulator configuration for cfg.
func Render(cfg topology.Config) ([]byte, error) {
	r := &recorder{topics: map[string]*topicEntry{}}
	if err := topology.Declare(context.Background(), r, cfg); err != nil {
		return nil, err
	}
	ns := namespace{Name: "sbemulatorns", Queues: r.queues}
	names := make([]string, 0, len(r.topics))
	for n := range r.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ns.Topics = append(ns.Topics, *r.topics[n])
	}
	out := map[string]any{"UserConfig": map[string]any{"Namespaces": []namespace{ns}, "Logging": map[string]string{"Type": "File"}}}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

type namespace struct {
	Name   string       `json:"Name"`
	Queues []queueEntry `json:"Queues"`
	Topics []topicEntry `json:"Topics"`
}

type queueEntry struct {
	Name       string         `json:"Name"`
	Properties map[string]any `json:"Properties"`
}

type topicEntry struct {
	Name          string         `json:"Name"`
	Properties    map[string]any `json:"Properties"`
	Subscriptions []subEntry     `json:"Subscriptions"`
}

type subEntry struct {
	Name       string         `json:"Name"`
	Properties map[string]any `json:"Properties"`
	Rules      []ruleEntry    `json:"Rules"`
}

type ruleEntry struct {
	Name       string         `json:"Name"`
	Properties map[string]any `json:"Properties"`
}

// recorder is a bus.Admin that records declarations instead of making them.
type recorder struct {
	queues []queueEntry
	topics map[string]*topicEntry
}

func (r *recorder) EnsureQueue(_ context.Context, name string, o bus.QueueOptions) error {
	r.queues = append(r.queues, queueEntry{Name: name, Properties: map[string]any{
		"DeadLetteringOnMessageExpiration":    o.DeadLetterOnExpiration,
		"DefaultMessageTimeToLive":            iso(or(o.DefaultTTL, bus.DefaultTTL)),
		"DuplicateDetectionHistoryTimeWindow": iso(or(o.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)),
		"ForwardDeadLetteredMessagesTo":       "",
		"ForwardTo":                           "",
		"LockDuration":                        iso(or(o.LockDuration, bus.DefaultLockDuration)),
		"MaxDeliveryCount":                    orInt(o.MaxDeliveryCount, bus.DefaultMaxDeliveryCount),
		"RequiresDuplicateDetection":          true,
		"RequiresSession":                     false,
	}})
	return nil
}

func (r *recorder) EnsureTopic(_ context.Context, name string, o bus.TopicOptions) error {
	if _, ok := r.topics[name]; ok {
		return nil
	}
	r.topics[name] = &topicEntry{Name: name, Subscriptions: []subEntry{}, Properties: map[string]any{
		"DefaultMessageTimeToLive":            iso(or(o.DefaultTTL, bus.DefaultTTL)),
		"DuplicateDetectionHistoryTimeWindow": iso(or(o.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)),
		"RequiresDuplicateDetection":          true,
	}}
	return nil
}

func (r *recorder) EnsureSubscription(_ context.Context, topic, name string, o bus.SubscriptionOptions) error {
	t, ok := r.topics[topic]
	if !ok {
		return fmt.Errorf("subscription %s of undeclared topic %s", name, topic)
	}
	for _, s := range t.Subscriptions {
		if s.Name == name {
			return nil
		}
	}
	sub := subEntry{Name: name, Rules: []ruleEntry{}, Properties: map[string]any{
		"DeadLetteringOnMessageExpiration": o.DeadLetterOnExpiration,
		"DefaultMessageTimeToLive":         iso(or(o.DefaultTTL, bus.DefaultTTL)),
		"LockDuration":                     iso(or(o.LockDuration, bus.DefaultLockDuration)),
		"MaxDeliveryCount":                 orInt(o.MaxDeliveryCount, bus.DefaultMaxDeliveryCount),
		"ForwardDeadLetteredMessagesTo":    "",
		"ForwardTo":                        "",
		"RequiresSession":                  false,
	}}
	if len(o.Filter) > 0 {
		sub.Rules = append(sub.Rules, ruleEntry{Name: "lucius-filter", Properties: map[string]any{
			"FilterType":        "Correlation",
			"CorrelationFilter": map[string]any{"Properties": o.Filter},
		}})
	}
	t.Subscriptions = append(t.Subscriptions, sub)
	return nil
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// iso formats a duration as ISO 8601 (PT1M, P14D).
func iso(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("P%dD", d/(24*time.Hour))
	}
	if d%time.Hour == 0 {
		return fmt.Sprintf("PT%dH", d/time.Hour)
	}
	if d%time.Minute == 0 {
		return fmt.Sprintf("PT%dM", d/time.Minute)
	}
	return fmt.Sprintf("PT%gS", d.Seconds())
}
