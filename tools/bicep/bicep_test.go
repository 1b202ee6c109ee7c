package bicep

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/workflow"
)

const committed = "../../deploy/azure/servicebus.bicep"

// The committed template must be what the topology declares today.
func TestCommittedTemplateIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := Render(topology.Config{Services: workflow.BuiltinServices()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/azure/servicebus.bicep is stale: run `make bicep` (go run ./tools/cmd/lucius-bicep > deploy/azure/servicebus.bicep) and commit it")
	}
}

// Every entity Lucius receives from is in the template, each subscription once
// with its one rule.
func TestTemplateDeclaresEverySourceLuciusReceivesFrom(t *testing.T) {
	t.Parallel()
	for _, tp := range []routing.Topology{routing.TopologyTwoTopicSets, routing.TopologyOneTopicSet} {
		cfg := topology.Config{Topology: tp, Services: []string{"ocr", "sis"}}
		out, err := Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		sources := topology.Sources(cfg)
		entries := strings.Count(text, "\n  { topic: ")
		if entries != len(sources)-1 { // all but the orchestrator-jobs queue
			t.Errorf("%s: %d subscriptions, want %d", tp, entries, len(sources)-1)
		}
		for _, src := range sources {
			var entry string
			if src.Queue != "" {
				entry = "{ name: " + quote(src.Queue) + ", "
			} else {
				entry = "{ topic: " + quote(src.Topic) + ", name: " + quote(src.Subscription) + ", "
			}
			if strings.Count(text, entry) != 1 {
				t.Errorf("%s: %s declared %d times, want once", tp, src, strings.Count(text, entry))
			}
		}
		if tp == routing.TopologyOneTopicSet && !strings.Contains(text,
			"{ topic: 'global-bus-p3', name: 'sis-burst', properties: { lockDuration: 'PT1M', maxDeliveryCount: 10, deadLetteringOnMessageExpiration: true }, "+
				"rule: { filterType: 'CorrelationFilter', correlationFilter: { properties: { lane: "+quote(string(routing.ModeBurst))+", service: 'sis' } } } }") {
			t.Errorf("one-topic-set: sis-burst on global-bus-p3 is missing or not filtered on lane and service")
		}
	}
}

func TestRenderRefusesMoreResourcesThanOneDeploymentHolds(t *testing.T) {
	t.Parallel()
	services := make([]string, 12) // 1 + 1 + 33 + 2×(1 + 12×32) = 805
	for i := range services {
		services[i] = "svc" + string(rune('a'+i))
	}
	if _, err := Render(topology.Config{Services: services}); err == nil || !strings.Contains(err.Error(), "800") {
		t.Fatalf("Render of 805 resources: err = %v, want the 800-resource limit", err)
	}
	if _, err := Render(topology.Config{Services: services[:11]}); err != nil {
		t.Fatalf("Render of 741 resources: %v", err)
	}
}

func TestRuleCarriesTheFilterLuciusDeclares(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter map[string]string
		want   string
	}{
		{"no filter is a TrueFilter", nil,
			"{ filterType: 'SqlFilter', sqlFilter: { sqlExpression: '1=1' } }"},
		{"service", map[string]string{"service": "ocr"},
			"{ filterType: 'CorrelationFilter', correlationFilter: { properties: { service: 'ocr' } } }"},
		{"keys sorted", map[string]string{"service": "ocr", "lane": "default"},
			"{ filterType: 'CorrelationFilter', correlationFilter: { properties: { lane: 'default', service: 'ocr' } } }"},
		{"key that is no identifier", map[string]string{"x-tenant": "a"},
			"{ filterType: 'CorrelationFilter', correlationFilter: { properties: { 'x-tenant': 'a' } } }"},
		{"value escaped", map[string]string{"service": `o'c\r${x}`},
			`{ filterType: 'CorrelationFilter', correlationFilter: { properties: { service: 'o\'c\\r\${x}' } } }`},
	} {
		if got := literal(ruleProperties(tc.filter)); got != tc.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}

func TestEntityPropertiesAreLuciusOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		got  object
		want string
	}{
		{"queue", queueProperties(bus.QueueOptions{LockDuration: 5 * time.Minute, MaxDeliveryCount: 10, DefaultTTL: 24 * time.Hour,
			DeadLetterOnExpiration: true, DuplicateDetectionWindow: 10 * time.Minute}),
			"{ lockDuration: 'PT5M', maxDeliveryCount: 10, defaultMessageTimeToLive: 'P1D', deadLetteringOnMessageExpiration: true, " +
				"requiresDuplicateDetection: true, duplicateDetectionHistoryTimeWindow: 'PT10M' }"},
		{"topic", topicProperties(bus.TopicOptions{DefaultTTL: 14 * 24 * time.Hour, DuplicateDetectionWindow: 90 * time.Second}),
			"{ defaultMessageTimeToLive: 'P14D', requiresDuplicateDetection: true, duplicateDetectionHistoryTimeWindow: 'PT1M30S' }"},
		{"subscription keeps the topic's TTL", subscriptionProperties(bus.SubscriptionOptions{LockDuration: time.Minute, MaxDeliveryCount: 10}),
			"{ lockDuration: 'PT1M', maxDeliveryCount: 10, deadLetteringOnMessageExpiration: false }"},
		{"subscription with its own TTL", subscriptionProperties(bus.SubscriptionOptions{LockDuration: time.Minute, MaxDeliveryCount: 3,
			DefaultTTL: 36 * time.Hour, DeadLetterOnExpiration: true}),
			"{ lockDuration: 'PT1M', maxDeliveryCount: 3, defaultMessageTimeToLive: 'P1DT12H', deadLetteringOnMessageExpiration: true }"},
	} {
		if got := literal(tc.got); got != tc.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}

func TestQuoteEscapesWhatBicepInterprets(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ocr":      `'ocr'`,
		"$Default": `'$Default'`,
		"it's":     `'it\'s'`,
		`a\b`:      `'a\\b'`,
		"${x}":     `'\${x}'`,
		"a\nb\tc":  `'a\nb\tc'`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
