package sbemulator

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/workflow"
)

// The committed emulator file must be what the topology declares today.
func TestCommittedEmulatorConfigIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := Render(topology.Config{Services: workflow.BuiltinServices()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../servicebus-emulator.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("servicebus-emulator.json is stale: run `go run ./tools/cmd/sbemulator-config > servicebus-emulator.json`")
	}
	var cfg struct {
		UserConfig struct {
			Namespaces []struct {
				Queues []struct{ Name string }
				Topics []struct {
					Name          string
					Subscriptions []struct{ Name string }
				}
			}
		}
	}
	if err := json.Unmarshal(got, &cfg); err != nil {
		t.Fatal(err)
	}
	ns := cfg.UserConfig.Namespaces[0]
	if len(ns.Queues) != 1 || len(ns.Topics) != 33 {
		t.Fatalf("%d queues and %d topics, want 1 and 33 (orchestrator-events + 32 directive topics)", len(ns.Queues), len(ns.Topics))
	}
	for _, topic := range ns.Topics {
		if topic.Name != "orchestrator-events" && len(topic.Subscriptions) != len(workflow.BuiltinServices()) {
			t.Fatalf("topic %s has %d subscriptions, want one per service", topic.Name, len(topic.Subscriptions))
		}
	}
}
