package topology

import (
	"testing"

	"github.com/lucius-platform/lucius/bus/routing"
)

func TestDirectiveSubscriptionsCoverEveryPartitionOfBothLanes(t *testing.T) {
	t.Parallel()
	two := DirectiveSubscriptions(routing.TopologyTwoTopicSets, "ocr")
	if len(two) != 32 || two[0].Topic != "global-default-p0" || two[16].Topic != "global-burst-p0" || two[31].Name != "ocr" {
		t.Fatalf("two topic sets: %d subscriptions, first %+v, last %+v", len(two), two[0], two[31])
	}
	one := DirectiveSubscriptions(routing.TopologyOneTopicSet, "ocr")
	if len(one) != 32 || one[0].Topic != "global-bus-p0" || one[0].Name != "ocr-default" || one[16].Name != "ocr-burst" {
		t.Fatalf("one topic set: %+v / %+v", one[0], one[16])
	}
	if n := len(DirectiveTopics(routing.TopologyOneTopicSet)); n != 16 {
		t.Fatalf("one topic set has %d topics, want 16", n)
	}
	if n := len(DirectiveTopics(routing.TopologyTwoTopicSets)); n != 32 {
		t.Fatalf("two topic sets have %d topics, want 32", n)
	}
}
