package schema

import (
	"testing"

	"github.com/lucius-platform/lucius/base/migrate"
)

func TestSetsComeInOrderAndKeepWhatIsAdded(t *testing.T) {
	extra := migrate.Set{Component: "extra"}
	sets := Sets(extra)
	var names []string
	for _, s := range sets {
		names = append(names, s.Component)
	}
	want := []string{"ledger", "config", "runbook", "extra"}
	if len(names) != len(want) {
		t.Fatalf("sets %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("sets %v, want %v", names, want)
		}
	}
	if a, b := Sets(), Sets(); &a[0] == &b[0] {
		t.Fatal("two calls share one slice: appending to one would change the other")
	}
}
