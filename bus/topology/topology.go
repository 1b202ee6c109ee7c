// Package topology declares the bus entities Lucius uses, identically from
// every process (declaring is idempotent), so no message is published to a
// topic before the subscriptions that must receive it exist:
//
//   - queue orchestrator-jobs: accepted commands, competed for by orchestrators,
//     with seed 000's settings: messages live a day (then the stranded-request
//     sweeper re-enqueues what was never claimed) and a lock lasts 5 minutes;
//   - topic orchestrator-events with subscription orchestrator: scheduler events;
//   - directive topics, 16 partitions per lane: global-default-p{n} and
//     global-burst-p{n} (two topic sets), or global-bus-p{n} (one topic set);
//   - per platform service, a subscription named after the service on every
//     directive topic, filtered on the message's service property (and, in the
//     one-topic-set topology, one per lane filtered on the lane property too).
package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/routing"
)

// Entity names.
const (
	QueueOrchestratorJobs     = "orchestrator-jobs"
	TopicOrchestratorEvents   = "orchestrator-events"
	SubscriptionOrchestrator  = "orchestrator"
	PropertyMessageType       = "MessageType" // what a message is; orchestrator-events subscriptions read it
	PropertyService           = "service"
	PropertyLane              = "lane"
	defaultEventsMaxDelivery  = 10
	defaultEventsLockDuration = time.Minute
	// DefaultJobsLockDuration and JobsTTL are seed 000's orchestrator-jobs
	// settings (lock PT5M, time to live P1D).
	DefaultJobsLockDuration = 5 * time.Minute
	JobsTTL                 = 24 * time.Hour
)

// Config describes the entities to declare.
type Config struct {
	Topology routing.Topology
	// Services get their directive subscriptions declared.
	Services []string
	// JobsLockDuration is the orchestrator-jobs lock (default 5m, seed 000);
	// a message claimed by an orchestrator that crashed before creating the job
	// returns after it. (The message is completed as soon as the job exists.)
	JobsLockDuration time.Duration
	// DirectiveLockDuration is the lock of directive subscriptions (default 60s).
	DirectiveLockDuration time.Duration
	// MaxDeliveryCount before a message is dead-lettered (default 10).
	MaxDeliveryCount int
}

// Subscription is one receivable directive subscription of a service.
type Subscription struct {
	Topic string
	Name  string
	Lane  routing.Mode
}

// Source is the bus source to receive the subscription from.
func (s Subscription) Source() bus.Source { return bus.SubscriptionSource(s.Topic, s.Name) }

// Lanes lists the two modes in a fixed order.
var Lanes = []routing.Mode{routing.ModeDefault, routing.ModeBurst}

// DirectiveSubscriptions lists the subscriptions a service receives directives from.
func DirectiveSubscriptions(topology routing.Topology, service string) []Subscription {
	var out []Subscription
	for _, lane := range Lanes {
		for p := range routing.Partitions {
			topic := routing.Topic(topology, lane, p)
			name := service
			if topology == routing.TopologyOneTopicSet {
				name = service + "-" + lane.Lane()
			}
			out = append(out, Subscription{Topic: topic, Name: name, Lane: lane})
		}
	}
	return out
}

// DirectiveTopics lists every directive topic of a topology.
func DirectiveTopics(topology routing.Topology) []string {
	seen := map[string]bool{}
	var out []string
	for _, lane := range Lanes {
		for p := range routing.Partitions {
			if t := routing.Topic(topology, lane, p); !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// Sources lists every entity Lucius receives from under cfg: the
// orchestrator-jobs queue, the orchestrator-events subscription and each
// service's directive subscriptions (each has a dead-letter queue).
func Sources(cfg Config) []bus.Source {
	if cfg.Topology == "" {
		cfg.Topology = routing.TopologyTwoTopicSets
	}
	out := []bus.Source{bus.QueueSource(QueueOrchestratorJobs),
		bus.SubscriptionSource(TopicOrchestratorEvents, SubscriptionOrchestrator)}
	for _, svc := range cfg.Services {
		for _, sub := range DirectiveSubscriptions(cfg.Topology, svc) {
			out = append(out, sub.Source())
		}
	}
	return out
}

// Declare creates or updates every entity of cfg.
func Declare(ctx context.Context, admin bus.Admin, cfg Config) error {
	if cfg.Topology == "" {
		cfg.Topology = routing.TopologyTwoTopicSets
	}
	jobsLock := cfg.JobsLockDuration
	if jobsLock == 0 {
		jobsLock = DefaultJobsLockDuration
	}
	if err := admin.EnsureQueue(ctx, QueueOrchestratorJobs, bus.QueueOptions{
		LockDuration: jobsLock, MaxDeliveryCount: cfg.MaxDeliveryCount, DeadLetterOnExpiration: true,
		DefaultTTL: JobsTTL,
	}); err != nil {
		return fmt.Errorf("declare %s: %w", QueueOrchestratorJobs, err)
	}
	if err := admin.EnsureTopic(ctx, TopicOrchestratorEvents, bus.TopicOptions{}); err != nil {
		return fmt.Errorf("declare %s: %w", TopicOrchestratorEvents, err)
	}
	if err := admin.EnsureSubscription(ctx, TopicOrchestratorEvents, SubscriptionOrchestrator, bus.SubscriptionOptions{
		LockDuration: defaultEventsLockDuration, MaxDeliveryCount: defaultEventsMaxDelivery, DefaultTTL: 14 * 24 * time.Hour,
		DeadLetterOnExpiration: true,
	}); err != nil {
		return fmt.Errorf("declare %s/%s: %w", TopicOrchestratorEvents, SubscriptionOrchestrator, err)
	}
	for _, topic := range DirectiveTopics(cfg.Topology) {
		if err := admin.EnsureTopic(ctx, topic, bus.TopicOptions{}); err != nil {
			return fmt.Errorf("declare %s: %w", topic, err)
		}
	}
	for _, svc := range cfg.Services {
		if err := DeclareService(ctx, admin, cfg, svc); err != nil {
			return err
		}
	}
	return nil
}

// DeclareService creates a service's directive subscriptions.
func DeclareService(ctx context.Context, admin bus.Admin, cfg Config, service string) error {
	if cfg.Topology == "" {
		cfg.Topology = routing.TopologyTwoTopicSets
	}
	for _, sub := range DirectiveSubscriptions(cfg.Topology, service) {
		filter := map[string]string{PropertyService: service}
		if cfg.Topology == routing.TopologyOneTopicSet {
			filter[PropertyLane] = string(sub.Lane)
		}
		if err := admin.EnsureTopic(ctx, sub.Topic, bus.TopicOptions{}); err != nil {
			return fmt.Errorf("declare %s: %w", sub.Topic, err)
		}
		if err := admin.EnsureSubscription(ctx, sub.Topic, sub.Name, bus.SubscriptionOptions{
			LockDuration: cfg.DirectiveLockDuration, MaxDeliveryCount: cfg.MaxDeliveryCount, Filter: filter,
			DeadLetterOnExpiration: true,
		}); err != nil {
			return fmt.Errorf("declare %s/%s: %w", sub.Topic, sub.Name, err)
		}
	}
	return nil
}

// ConfigFromEnv reads the topology settings every process must agree on, from
// the same variables in every main package: declarations are create-or-update,
// so a process declaring other options would change them for all.
//
//	LUCIUS_TOPOLOGY                  two-topic-sets (default) | one-topic-set
//	LUCIUS_JOBS_LOCK_DURATION        orchestrator-jobs lock (5m)
//	LUCIUS_DIRECTIVE_LOCK_DURATION   directive subscriptions' lock (60s)
//	LUCIUS_MAX_DELIVERY_COUNT        deliveries before dead-lettering (10)
func ConfigFromEnv(e *env.Reader) (Config, error) {
	t, err := routing.ParseTopology(e.String("LUCIUS_TOPOLOGY", ""))
	return Config{
		Topology:              t,
		JobsLockDuration:      e.Duration("LUCIUS_JOBS_LOCK_DURATION", 0),
		DirectiveLockDuration: e.Duration("LUCIUS_DIRECTIVE_LOCK_DURATION", 0),
		MaxDeliveryCount:      e.Int("LUCIUS_MAX_DELIVERY_COUNT", 0),
	}, err
}
