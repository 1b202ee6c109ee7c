package workflow

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// laughs is a "billion laughs" workflow: ten levels of anchors in a task's
// params, each a list of ten aliases of the previous one (10^10 strings once
// expanded).
func laughs() string {
	var b strings.Builder
	b.WriteString("workflow_id: lol\nversion: 1\nnodes:\n  START: {type: start, next: t}\n  t:\n    type: task\n    handler: OCR\n    next: END\n    params:\n")
	b.WriteString("      l0: &l0 lol\n")
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	b.WriteString("  END: {type: end}\n")
	return b.String()
}

// TestParseRefusesYAMLBombsCheaply: an alias bomb and nesting past the depth
// limit are refused, each allocating little. Not parallel: the allocation
// counter is the process's.
func TestParseRefusesYAMLBombsCheaply(t *testing.T) {
	c := builtinCatalog(t)
	deep := func(n int) string {
		return "workflow_id: deep\nversion: 1\nnodes:\n  START: {type: start, next: t}\n  t: {type: task, handler: OCR, next: END, params: {p: " +
			strings.Repeat("[", n) + strings.Repeat("]", n) + "}}\n  END: {type: end}\n"
	}
	for _, tt := range []struct {
		name, src, want string
	}{
		{"billion laughs", laughs(), "alias_expansion"},
		{"nesting one past max_depth", deep(DefaultMaxDepth - 3), "max_depth"},
		{"nesting far past max_depth", deep(5000), "max_depth"},
		{"nesting past the YAML decoder's own bound", deep(20000), "exceeded max depth"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse("lol.yaml", []byte(tt.src), c)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("refusing it allocated %d bytes", got)
			}
		})
	}
	if _, err := Parse("deep.yaml", []byte(deep(DefaultMaxDepth-4)), c); err != nil {
		t.Fatalf("nesting at max_depth: %v", err)
	}
}

func TestParseAcceptsAnchorsForSharedBlocks(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("workflow_id: shared\nversion: 1\nnodes:\n  START: {type: start, next: t0}\n")
	b.WriteString("  t0: {type: task, handler: OCR, next: t1, retry: &retry {max_attempts: 5, backoff: fixed, initial_delay_seconds: 1}, params: &common {a: 1, b: [x, y], c: {d: e}}}\n")
	for i := 1; i < 50; i++ {
		next := fmt.Sprintf("t%d", i+1)
		if i == 49 {
			next = "END"
		}
		fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, next: %s, retry: *retry, params: *common}\n", i, next)
	}
	b.WriteString("  END: {type: end}\n")
	d, err := Parse("shared.yaml", []byte(b.String()), builtinCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := d.Node("t49"); n.Task.Retry.MaxAttempts != 5 || len(n.Task.Params) != 3 {
		t.Fatalf("t49 did not get the shared blocks: %+v", n.Task)
	}
}
