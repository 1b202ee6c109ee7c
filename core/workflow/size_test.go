package workflow

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Shapes of generated definitions.
const (
	shapeChain = "chain" // START → t0 → t1 → … → END, each task reading its predecessor's output
	shapeWide  = "wide"  // START → t0 … tn-1 (all at once) → a fan_in → END
	shapeFan   = "fan"   // a chain of fan_outs and conditionals with templated params
	shapeTiny  = "tiny"  // a chain of tasks without params, about 45 bytes a node
)

// generate writes an n-node workflow of a shape; every shape is valid.
func generate(shape string, n int) []byte {
	var b strings.Builder
	b.WriteString("workflow_id: gen_" + shape + "\nversion: 1\ninputs:\n  items: {type: list, default: [a, b, c]}\n  name: {type: string, default: x}\nnodes:\n")
	tasks := max(n-2, 1)
	switch shape {
	case shapeChain:
		b.WriteString("  START: {type: start, next: t0}\n")
		for i := range tasks {
			next := fmt.Sprintf("t%d", i+1)
			if i == tasks-1 {
				next = "END"
			}
			from := "{{ inputs.name }}"
			if i > 0 {
				from = fmt.Sprintf("{{ nodes.t%d.output.text }}", i-1)
			}
			fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, params: {text: %q, n: %d}, next: %s}\n", i, from, i, next)
		}
	case shapeTiny:
		b.WriteString("  START: {type: start, next: t0}\n")
		for i := range tasks {
			next := fmt.Sprintf("t%d", i+1)
			if i == tasks-1 {
				next = "END"
			}
			fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, next: %s}\n", i, next)
		}
	case shapeWide:
		tasks = max(n-3, 1)
		b.WriteString("  START:\n    type: start\n    next:\n")
		for i := range tasks {
			fmt.Fprintf(&b, "      - t%d\n", i)
		}
		for i := range tasks {
			fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, params: {name: \"{{ inputs.name }}\"}, next: join}\n", i)
		}
		b.WriteString("  join: {type: fan_in, next: END}\n")
	case shapeFan:
		b.WriteString("  START: {type: start, next: n0}\n")
		for i := range tasks {
			next := fmt.Sprintf("n%d", i+1)
			if i == tasks-1 {
				next = "END"
			}
			if i%2 == 0 {
				fmt.Fprintf(&b, "  n%d:\n    type: fan_out\n    over: \"{{ inputs.items }}\"\n    max_parallel: 2\n    task:\n      handler: OCR\n      params: {item: \"{{ item }}\", at: \"{{ index }}\", name: \"{{ inputs.name }}\"}\n    next: %s\n", i, next)
			} else {
				fmt.Fprintf(&b, "  n%d:\n    type: conditional\n    condition_field: \"{{ nodes.n%d.output[0] }}\"\n    branches:\n      - {condition: \"== stop\", next: END}\n      - {default: true, next: %s}\n", i, i-1, next)
			}
		}
	default:
		panic("unknown shape " + shape)
	}
	b.WriteString("  END: {type: end}\n")
	return []byte(b.String())
}

// unlimited raises every limit far above what the tests generate.
var unlimited = Limits{MaxNodes: 1 << 20, MaxEdges: 1 << 22, MaxSourceBytes: 1 << 30, MaxFanOut: 1 << 20, MaxExpansionBytes: 1 << 30}

func BenchmarkParseSize(b *testing.B) {
	c := builtinCatalog(b)
	for _, shape := range []string{shapeChain, shapeWide, shapeFan} {
		for _, n := range []int{1000, 4000, 15000} {
			src := generate(shape, n)
			b.Run(fmt.Sprintf("%s/%d", shape, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ParseWithLimits("gen.yaml", src, c, unlimited); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// midway is the state of a job of d halfway through: the first half of the
// nodes (in declaration order) succeeded with a small output, the rest pending.
func midway(d *Definition) State {
	st := State{Inputs: map[string]any{"items": []any{"a", "b", "c"}, "name": "x"}, Nodes: map[string]*NodeState{}}
	for i, n := range d.Nodes {
		if i < len(d.Nodes)/2 && n.Type != TypeEnd {
			ns := &NodeState{Status: Succeeded, Output: map[string]any{"text": "t"}}
			switch n.Type {
			case TypeFanOut:
				ns.Output, ns.Expanded = []any{"a", "b", "c"}, true
				ns.Children = Children{Total: 3, Succeeded: 3}
			case TypeConditional:
				ns.Output = map[string]any{"branch": n.Branches[1].Next, "value": "a"}
			}
			st.Nodes[n.ID] = ns
		}
	}
	return st
}

func BenchmarkEvaluateSize(b *testing.B) {
	c := builtinCatalog(b)
	for _, shape := range []string{shapeChain, shapeWide, shapeFan} {
		for _, n := range []int{1000, 4000, 15000} {
			d, err := ParseWithLimits("gen.yaml", generate(shape, n), c, unlimited)
			if err != nil {
				b.Fatal(err)
			}
			for _, at := range []struct {
				name string
				st   State
			}{{"start", State{Inputs: map[string]any{"items": []any{"a"}, "name": "x"}}}, {"midway", midway(d)}} {
				b.Run(fmt.Sprintf("%s/%d/%s", shape, n, at.name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if len(Evaluate(d, at.st)) == 0 {
							b.Fatal("no actions")
						}
					}
				})
			}
		}
	}
}

// cost is what f allocates, per run, over a few runs.
func cost(f func()) (allocs, bytes float64) {
	const runs = 3
	f() // warm up caches (regexps, the catalog)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / runs, float64(after.TotalAlloc-before.TotalAlloc) / runs
}

// TestDefinitionCostGrowsLinearly: four times the nodes must cost at most
// about eight times the allocations and bytes (linear growth gives four,
// quadratic sixteen), for parsing and for evaluating a job at its start and
// halfway. Not parallel: the allocation counters are the process's.
func TestDefinitionCostGrowsLinearly(t *testing.T) {
	c := builtinCatalog(t)
	const small, factor, bound = 400, 4, 8.0
	type measure struct{ allocs, bytes float64 }
	measureAt := func(t *testing.T, shape string, n int) (parse, start, mid measure) {
		src := generate(shape, n)
		var d *Definition
		parse.allocs, parse.bytes = cost(func() {
			var err error
			if d, err = ParseWithLimits("gen.yaml", src, c, unlimited); err != nil {
				t.Fatal(err)
			}
		})
		fresh := State{Inputs: map[string]any{"items": []any{"a"}, "name": "x"}}
		start.allocs, start.bytes = cost(func() { Evaluate(d, fresh) })
		half := midway(d)
		mid.allocs, mid.bytes = cost(func() { Evaluate(d, half) })
		return parse, start, mid
	}
	for _, shape := range []string{shapeChain, shapeWide, shapeFan} {
		t.Run(shape, func(t *testing.T) {
			p1, s1, m1 := measureAt(t, shape, small)
			p4, s4, m4 := measureAt(t, shape, small*factor)
			for _, m := range []struct {
				what     string
				one, big measure
			}{{"parse", p1, p4}, {"evaluate at start", s1, s4}, {"evaluate halfway", m1, m4}} {
				if r := m.big.allocs / max(m.one.allocs, 1); r > bound {
					t.Errorf("%s: %d nodes make %.0f allocations, %d nodes %.0f: %.1f times for %d times the nodes",
						m.what, small, m.one.allocs, small*factor, m.big.allocs, r, factor)
				}
				if r := m.big.bytes / max(m.one.bytes, 1); r > bound {
					t.Errorf("%s: %d nodes allocate %.0f bytes, %d nodes %.0f: %.1f times for %d times the nodes",
						m.what, small, m.one.bytes, small*factor, m.big.bytes, r, factor)
				}
			}
		})
	}
}

func TestParseRefusesDefinitionsOverLimits(t *testing.T) {
	t.Parallel()
	c := builtinCatalog(t)
	deep := "workflow_id: deep\nversion: 1\nnodes:\n  START: {type: start, next: t}\n  t: {type: task, handler: OCR, next: END, params: {p: " +
		strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}}\n  END: {type: end}\n"
	tests := []struct {
		name   string
		src    []byte
		limits Limits
		limit  string
		value  int
		where  string
	}{
		{"a 15,000-node workflow with the defaults", generate(shapeTiny, 15000), Limits{}, "max_nodes", 15000, "gen.yaml:1007:3"},
		{"one node more than max_nodes", generate(shapeChain, 11), Limits{MaxNodes: 10}, "max_nodes", 11, "gen.yaml:17:3"},
		{"edges over max_edges: counting stops at the node passing it", generate(shapeWide, 20), Limits{MaxEdges: 18}, "max_edges", 19, "gen.yaml:28:3"},
		{"source over max_source_bytes", generate(shapeChain, 10), Limits{MaxSourceBytes: 100}, "max_source_bytes", len(generate(shapeChain, 10)), "gen.yaml:1:1"},
		{"nesting over max_depth", []byte(deep), Limits{}, "max_depth", 33, "gen.yaml:5:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseWithLimits("gen.yaml", tt.src, c, tt.limits)
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("error %v, want a *LimitError", err)
			}
			if le.Limit != tt.limit || le.Value != tt.value || !strings.HasPrefix(le.Where, tt.where) {
				t.Errorf("limit %s value %d at %s, want %s %d at %s (%v)", le.Limit, le.Value, le.Where, tt.limit, tt.value, tt.where, err)
			}
			if !strings.Contains(err.Error(), tt.limit) {
				t.Errorf("message %q does not name the limit", err)
			}
		})
	}
}

func TestParseAcceptsDefinitionsAtLimits(t *testing.T) {
	t.Parallel()
	c := builtinCatalog(t)
	for _, tt := range []struct {
		name   string
		src    []byte
		limits Limits
	}{
		{"default max_nodes", generate(shapeChain, DefaultMaxNodes), Limits{}},
		{"max_nodes exactly", generate(shapeWide, 10), Limits{MaxNodes: 10}},
		{"max_edges exactly", generate(shapeWide, 20), Limits{MaxEdges: 35}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseWithLimits("gen.yaml", tt.src, c, tt.limits); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEvaluateFailsAFanOutWiderThanMaxFanOut(t *testing.T) {
	t.Parallel()
	d, err := ParseWithLimits("gen.yaml", generate(shapeFan, 4), builtinCatalog(t), Limits{MaxFanOut: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		items    int
		wantFail bool
	}{{3, false}, {4, true}} {
		items := make([]any, tt.items)
		acts := Evaluate(d, State{Inputs: map[string]any{"items": items, "name": "x"}})
		var fail, expand *Action
		for i := range acts {
			switch acts[i].Kind {
			case ActFail:
				fail = &acts[i]
			case ActExpand:
				expand = &acts[i]
			}
		}
		switch {
		case tt.wantFail && (fail == nil || expand != nil || !strings.Contains(fail.Reason, "max_fan_out")):
			t.Errorf("%d items: actions %+v, want a failure naming max_fan_out and no expansion", tt.items, acts)
		case !tt.wantFail && (fail != nil || expand == nil):
			t.Errorf("%d items: actions %+v, want an expansion", tt.items, acts)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		limits Limits
		ok     bool
	}{
		{"zero means defaults", Limits{}, true},
		{"raised", Limits{MaxNodes: 20000, MaxEdges: 80000}, true},
		{"negative", Limits{MaxFanOut: -1}, false},
		{"too few nodes", Limits{MaxNodes: 2}, false},
		{"edges cannot connect the nodes", Limits{MaxNodes: 100, MaxEdges: 50}, false},
		{"depth below a task's params", Limits{MaxDepth: 3}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.limits.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
