package scheduler

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/runbook"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/events")

// goldenFiles are the event files: one per type, and poll-check of an init
// execution (initExecutionId instead of stepExecutionId).
var goldenFiles = []string{"batch-init", "phase-due", "member-added", "member-removed", "poll-check", "poll-check-init"}

// The events of a deterministic run, body for body, are the golden files
// (go test -run TestEventBodiesMatchGoldenFiles -update rewrites them), and
// their message ids are derived from the facts.
func TestEventBodiesMatchGoldenFiles(t *testing.T) {
	t.Parallel()
	f := setup(t)
	name := "contoso-mailbox-migration"
	f.apply(spec{name: name, version: 3, init: true, pollInit: true})
	f.load(name, 3, []runbook.Member{mbr("alice", start), mbr("bob", start), mbr("carol", start)})
	f.tick() // batch-init

	f.clock.Advance(time.Minute)
	f.load(name, 3, []runbook.Member{mbr("alice", start), mbr("bob", start), mbr("carol", start), mbr("newuser", start)})
	f.tick() // member-added
	f.clock.Advance(time.Minute)
	f.load(name, 3, []runbook.Member{mbr("alice", start), mbr("bob", start), mbr("newuser", start)})
	f.tick() // member-removed

	f.exec(`UPDATE init_executions SET status = 'polling', poll_started_at = $1, last_polled_at = $1, poll_count = 4`,
		f.clock.Now())
	f.clock.Advance(30 * time.Second)
	f.tick() // poll-check of the init step
	f.exec(`UPDATE init_executions SET status = 'succeeded'`)
	f.activate(1)

	f.clock.Set(start.Add(-60 * time.Minute))
	f.tick() // phase-due notify
	f.clock.Set(start)
	f.tick() // phase-due migrate
	f.exec(`UPDATE step_executions SET status = 'polling', poll_started_at = $1, last_polled_at = $1, poll_count = 4
		WHERE step_name = 'start-move' AND batch_member_id = 1`, start)
	f.clock.Advance(time.Minute)
	f.tick() // poll-check of the step

	added := start.Add(-2*time.Hour + time.Minute).UnixNano()
	removed := start.Add(-2*time.Hour + 2*time.Minute).UnixNano()
	equal(t, "message ids", f.ids(""), []string{
		"batch-init/1/v3",
		fmt.Sprintf("member-added/4/%d", added),
		fmt.Sprintf("member-removed/3/%d", removed),
		"poll-check/init/1/5",
		"phase-due/1",
		"phase-due/2",
		"poll-check/step/4/5",
	})

	got := map[string][]byte{}
	for _, m := range f.messages("") {
		file := m.Properties[topology.PropertyMessageType]
		if _, init := m.Body["initExecutionId"]; init {
			file += "-init"
		}
		if _, seen := got[file]; !seen {
			got[file] = m.Raw
		}
	}
	for _, file := range goldenFiles {
		raw, ok := got[file]
		if !ok {
			t.Fatalf("the run emitted no %s", file)
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, raw, "", "  "); err != nil {
			t.Fatal(err)
		}
		pretty.WriteByte('\n')
		path := filepath.Join("testdata", "events", file+".json")
		if *update {
			if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(pretty.Bytes(), want) {
			t.Errorf("%s differs from %s:\n%s", file, path, pretty.Bytes())
		}
	}
}

// Every golden event has exactly the fields of seed 003's example of its
// type, with the same JSON types (poll-check of an init execution names
// initExecutionId where the seed has stepExecutionId).
func TestGoldenEventsHaveTheSeedsFields(t *testing.T) {
	if *update {
		t.Skip("the golden files are being rewritten")
	}
	t.Parallel()
	for _, file := range goldenFiles {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			seedFile := file
			rename := map[string]string{}
			if file == "poll-check-init" {
				seedFile, rename = "poll-check", map[string]string{"stepExecutionId": "initExecutionId"}
			}
			seed := readShape(t, filepath.Join("testdata", "seed", seedFile+".json"), rename)
			golden := readShape(t, filepath.Join("testdata", "events", file+".json"), nil)
			if !maps.Equal(golden, seed) {
				t.Fatalf("fields and types\n got %v\nwant %v (seed 003)", golden, seed)
			}
		})
	}
}

// readShape returns a JSON object's fields with their JSON types (arrays
// with their element types), keys renamed as given.
func readShape(t *testing.T, path string, rename map[string]string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	shape := map[string]string{}
	for k, v := range obj {
		if to, ok := rename[k]; ok {
			k = to
		}
		shape[k] = jsonType(v)
	}
	return shape
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		elems := map[string]bool{}
		for _, e := range v {
			elems[jsonType(e)] = true
		}
		return fmt.Sprintf("array of %v", slices.Sorted(maps.Keys(elems)))
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
