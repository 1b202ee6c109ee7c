package busentity

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
)

func TestISODurationWritesEachUnitOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{60 * time.Second, "PT1M"},
		{5 * time.Minute, "PT5M"},
		{10 * time.Minute, "PT10M"},
		{2 * time.Hour, "PT2H"},
		{24 * time.Hour, "P1D"},
		{336 * time.Hour, "P14D"},
		{90 * time.Minute, "PT1H30M"},
		{26*time.Hour + 30*time.Minute, "P1DT2H30M"},
		{1500 * time.Millisecond, "PT1.5S"},
		{1000001 * time.Second, "P11DT13H46M41S"},
		{1000000*time.Second + 500*time.Millisecond, "P11DT13H46M40.5S"},
		{0, "PT0S"},
	} {
		if got := ISODuration(tc.d); got != tc.want {
			t.Errorf("ISODuration(%s) = %s, want %s", tc.d, got, tc.want)
		}
	}
}

func TestRecordAppliesTheAdapterDefaults(t *testing.T) {
	t.Parallel()
	set, err := Record(topology.Config{Services: []string{"ocr"}, DirectiveLockDuration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Queues) != 1 || set.Queues[0].Options != (bus.QueueOptions{
		LockDuration: topology.DefaultJobsLockDuration, MaxDeliveryCount: bus.DefaultMaxDeliveryCount,
		DefaultTTL: topology.JobsTTL, DeadLetterOnExpiration: true, DuplicateDetectionWindow: bus.DefaultDuplicateDetection,
	}) {
		t.Fatalf("queues %+v", set.Queues)
	}
	if len(set.Topics) != 1+2*routing.Partitions {
		t.Fatalf("%d topics, want orchestrator-events and %d directive topics", len(set.Topics), 2*routing.Partitions)
	}
	for _, topic := range set.Topics {
		if topic.Options != (bus.TopicOptions{DefaultTTL: bus.DefaultTTL, DuplicateDetectionWindow: bus.DefaultDuplicateDetection}) {
			t.Fatalf("topic %s options %+v", topic.Name, topic.Options)
		}
	}
	directive := set.SubscriptionsOf("global-default-p3")
	if len(directive) != 1 {
		t.Fatalf("global-default-p3 subscriptions %+v", directive)
	}
	o := directive[0].Options
	if directive[0].Name != "ocr" || o.LockDuration != 2*time.Minute || o.MaxDeliveryCount != bus.DefaultMaxDeliveryCount ||
		o.DefaultTTL != 0 || !o.DeadLetterOnExpiration || len(o.Filter) != 1 || o.Filter[topology.PropertyService] != "ocr" {
		t.Fatalf("global-default-p3/ocr %+v", directive[0])
	}
}

// Declaring an entity again updates it where it stands, as create-or-update does.
func TestRecordUpdatesARedeclaredEntityInPlace(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.EnsureTopic(ctx, "a", bus.TopicOptions{}))
	must(r.EnsureTopic(ctx, "b", bus.TopicOptions{}))
	must(r.EnsureSubscription(ctx, "a", "s", bus.SubscriptionOptions{MaxDeliveryCount: 3}))
	must(r.EnsureTopic(ctx, "a", bus.TopicOptions{DefaultTTL: time.Hour}))
	must(r.EnsureSubscription(ctx, "a", "s", bus.SubscriptionOptions{MaxDeliveryCount: 4}))
	if len(r.set.Topics) != 2 || r.set.Topics[0].Name != "a" || r.set.Topics[0].Options.DefaultTTL != time.Hour {
		t.Fatalf("topics %+v", r.set.Topics)
	}
	if len(r.set.Subscriptions) != 1 || r.set.Subscriptions[0].Options.MaxDeliveryCount != 4 {
		t.Fatalf("subscriptions %+v", r.set.Subscriptions)
	}
	if err := r.EnsureSubscription(ctx, "c", "s", bus.SubscriptionOptions{}); err == nil {
		t.Fatal("a subscription of an undeclared topic was recorded")
	}
}
