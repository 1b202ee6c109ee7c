// Package sbemulator renders the Azure Service Bus emulator's entity file
// (Config.json) from the same topology declaration every Lucius process runs, so
// the production transport's local stand-in has exactly the entities Lucius
// declares.
package sbemulator

import (
	"encoding/json"
	"sort"

	"github.com/lucius-platform/lucius/bus/sbbus"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/tools/busentity"
)

// Render returns the emulator configuration for cfg.
func Render(cfg topology.Config) ([]byte, error) {
	set, err := busentity.Record(cfg)
	if err != nil {
		return nil, err
	}
	ns := namespace{Name: "sbemulatorns", Queues: []queueEntry{}, Topics: []topicEntry{}}
	for _, q := range set.Queues {
		ns.Queues = append(ns.Queues, queueEntry{Name: q.Name, Properties: map[string]any{
			"DeadLetteringOnMessageExpiration":    q.Options.DeadLetterOnExpiration,
			"DefaultMessageTimeToLive":            iso(q.Options.DefaultTTL),
			"DuplicateDetectionHistoryTimeWindow": iso(q.Options.DuplicateDetectionWindow),
			"ForwardDeadLetteredMessagesTo":       "",
			"ForwardTo":                           "",
			"LockDuration":                        iso(q.Options.LockDuration),
			"MaxDeliveryCount":                    q.Options.MaxDeliveryCount,
			"RequiresDuplicateDetection":          true,
			"RequiresSession":                     false,
		}})
	}
	topics := append([]busentity.Topic(nil), set.Topics...)
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	for _, t := range topics {
		entry := topicEntry{Name: t.Name, Subscriptions: []subEntry{}, Properties: map[string]any{
			"DefaultMessageTimeToLive":            iso(t.Options.DefaultTTL),
			"DuplicateDetectionHistoryTimeWindow": iso(t.Options.DuplicateDetectionWindow),
			"RequiresDuplicateDetection":          true,
		}}
		for _, s := range set.SubscriptionsOf(t.Name) {
			ttl := s.Options.DefaultTTL
			if ttl == 0 {
				ttl = t.Options.DefaultTTL
			}
			sub := subEntry{Name: s.Name, Rules: []ruleEntry{}, Properties: map[string]any{
				"DeadLetteringOnMessageExpiration": s.Options.DeadLetterOnExpiration,
				"DefaultMessageTimeToLive":         iso(ttl),
				"LockDuration":                     iso(s.Options.LockDuration),
				"MaxDeliveryCount":                 s.Options.MaxDeliveryCount,
				"ForwardDeadLetteredMessagesTo":    "",
				"ForwardTo":                        "",
				"RequiresSession":                  false,
			}}
			if len(s.Options.Filter) > 0 {
				sub.Rules = append(sub.Rules, ruleEntry{Name: sbbus.FilterRuleName, Properties: map[string]any{
					"FilterType":        "Correlation",
					"CorrelationFilter": map[string]any{"Properties": s.Options.Filter},
				}})
			}
			entry.Subscriptions = append(entry.Subscriptions, sub)
		}
		ns.Topics = append(ns.Topics, entry)
	}
	out := map[string]any{"UserConfig": map[string]any{"Namespaces": []namespace{ns}, "Logging": map[string]string{"Type": "File"}}}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

var iso = busentity.ISODuration

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
