package runbook

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// laughs is a "billion laughs" document: ten levels of anchors, each a list
// of ten aliases of the previous one (10^10 strings once expanded), in
// params where a runbook may nest values.
func laughs() string {
	var b strings.Builder
	b.WriteString("name: r\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - name: s\n        worker_id: w\n        function: f\n        params:\n")
	b.WriteString("          l0: &l0 lol\n")
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "          l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	return b.String()
}

// TestParseRefusesYAMLBombsCheaply: aliases are refused without being
// expanded, and nesting past MaxDepth is refused, each allocating little.
// Not parallel: the allocation counter is the process's.
func TestParseRefusesYAMLBombsCheaply(t *testing.T) {
	deep := func(n int) string {
		return "name: r\nversion: 1\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n      - {name: s, worker_id: w, function: f, params: {x: " +
			strings.Repeat("[", n) + strings.Repeat("]", n) + "}}\n"
	}
	for _, tt := range []struct {
		name, src, want string
	}{
		{"billion laughs", laughs(), "YAML aliases (*l0) are not supported"},
		{"nesting one past MaxDepth", deep(MaxDepth - 5), "nest more than 32 deep"},
		{"nesting far past MaxDepth", deep(5000), "nest more than 32 deep"},
		{"nesting past the YAML decoder's own bound", deep(20000), "exceeded max depth"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse("r.yaml", []byte(tt.src))
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("refusing it allocated %d bytes", got)
			}
		})
	}
	// The deepest nesting allowed still parses.
	if _, err := Parse("r.yaml", []byte(deep(MaxDepth-6))); err != nil {
		t.Fatalf("nesting at MaxDepth: %v", err)
	}
}
