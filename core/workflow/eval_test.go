package workflow

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func testCatalog() *HandlerCatalog {
	c := NewCatalog()
	for _, h := range []string{"h", "g", "split", "agg"} {
		_ = c.Add(HandlerInfo{Name: h, Service: "svc"})
	}
	return c
}

func mustParse(t testing.TB, y string) *Definition {
	t.Helper()
	d, err := Parse("t.yaml", []byte(y), testCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func kinds(actions []Action) string {
	var out []string
	for _, a := range actions {
		switch a.Kind {
		case ActDispatch:
			out = append(out, "dispatch:"+a.Node)
		case ActExpand:
			out = append(out, fmt.Sprintf("expand:%s:%d", a.Node, len(a.Items)))
		case ActDispatchChildren:
			out = append(out, fmt.Sprintf("children:%s:%d", a.Node, a.Count))
		case ActResolve:
			out = append(out, fmt.Sprintf("%s:%s", strings.ToLower(string(a.Status)), a.Node))
		case ActFail:
			out = append(out, "fail")
		case ActComplete:
			out = append(out, "complete:"+strings.ToLower(string(a.Status)))
		case ActCancelled:
			out = append(out, "cancelled")
		}
	}
	return strings.Join(out, " ")
}

const linearYAML = `workflow_id: lin
version: 1
inputs:
  x: {type: integer, default: 5}
nodes:
  S: {type: start, next: a}
  a: {type: task, handler: h, params: {v: "{{ inputs.x }}"}, next: b}
  b: {type: task, handler: h, params: {from_a: "{{ nodes.a.output.n }}"}, next: E}
  E: {type: end}
`

const branchYAML = `workflow_id: br
version: 1
nodes:
  S: {type: start, next: v}
  v: {type: task, handler: h, next: c}
  c:
    type: conditional
    condition_field: "{{ nodes.v.output.size }}"
    branches:
      - {condition: "< 100", next: small}
      - {default: true, next: big}
  small: {type: task, handler: h, next: after_small}
  after_small: {type: task, handler: h, next: join}
  big: {type: task, handler: h, next: join}
  join: {type: task, handler: g, next: E}
  E: {type: end}
`

// whenYAML branches with CEL over the value and the inputs.
const whenYAML = `workflow_id: wh
version: 1
inputs:
  mode: {type: string, default: careful}
nodes:
  S: {type: start, next: v}
  v: {type: task, handler: h, next: c}
  c:
    type: conditional
    condition_field: "{{ nodes.v.output.size }}"
    branches:
      - {when: "inputs.mode == 'fast' || lucius.number(value) < 100.0", next: small}
      - {default: true, next: big}
  small: {type: task, handler: h, next: E}
  big: {type: task, handler: h, next: E}
  E: {type: end}
`

const fanYAML = `workflow_id: fan
version: 1
nodes:
  S: {type: start, next: plan}
  plan: {type: task, handler: split, next: f}
  f:
    type: fan_out
    over: "{{ nodes.plan.output.items }}"
    max_parallel: 2
    task: {handler: h, params: {item: "{{ item }}", i: "{{ index }}"}}
    next: gather
  gather: {type: fan_in, next: agg}
  agg: {type: task, handler: agg, params: {all: "{{ nodes.gather.output }}"}, next: E}
  E: {type: end}
`

func TestEvaluate(t *testing.T) {
	t.Parallel()
	ok := func(out any) *NodeState { return &NodeState{Status: Succeeded, Output: out} }
	tests := []struct {
		name  string
		yaml  string
		state State
		want  string
	}{
		{"fresh linear job starts the first task", linearYAML, State{Inputs: map[string]any{"x": 5.0}},
			"succeeded:S dispatch:a"},
		{"a running task blocks its successor", linearYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "a": {Status: InProgress}}},
			""},
		{"a finished task starts the next", linearYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "a": ok(map[string]any{"n": 1.0})}},
			"dispatch:b"},
		{"the last task finishing completes the job", linearYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "a": ok(nil), "b": ok(nil)}},
			"succeeded:E complete:succeeded"},
		{"a failed task fails the job", linearYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "a": {Status: FailedFinal}}},
			"fail"},
		{"small branch taken, big skipped, join runs", branchYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(map[string]any{"size": 12.0})}},
			"succeeded:c dispatch:small skipped:big"},
		{"big branch taken, small path skipped through", branchYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(map[string]any{"size": 500.0})}},
			"succeeded:c skipped:small dispatch:big skipped:after_small"},
		{"join waits for the taken branch", branchYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(nil),
			"c": ok(map[string]any{"branch": "small"}), "big": {Status: Skipped}, "small": ok(nil), "after_small": {Status: InProgress}}},
			""},
		{"join runs after the taken branch", branchYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(nil),
			"c": ok(map[string]any{"branch": "small"}), "big": {Status: Skipped}, "small": ok(nil), "after_small": ok(nil)}},
			"dispatch:join"},
		{"when: a small value takes the first branch", whenYAML, State{Inputs: map[string]any{"mode": "careful"},
			Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(map[string]any{"size": 12.0})}},
			"succeeded:c dispatch:small skipped:big"},
		{"when: a big value takes the default", whenYAML, State{Inputs: map[string]any{"mode": "careful"},
			Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(map[string]any{"size": 500.0})}},
			"succeeded:c skipped:small dispatch:big"},
		{"when: an input decides too", whenYAML, State{Inputs: map[string]any{"mode": "fast"},
			Nodes: map[string]*NodeState{"S": ok(nil), "v": ok(map[string]any{"size": 500.0})}},
			"succeeded:c dispatch:small skipped:big"},
		{"fan_out expands and respects max_parallel", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil),
			"plan": ok(map[string]any{"items": []any{"a", "b", "c", "d", "e"}})}},
			"expand:f:5 children:f:2"},
		{"a finished child makes room for the next", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(nil),
			"f": {Status: InProgress, Expanded: true, Children: Children{Total: 5, Pending: 3, Running: 1, Succeeded: 1}}}},
			"children:f:1"},
		{"fan_in does not fire before the last child", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(nil),
			"f": {Status: InProgress, Expanded: true, Children: Children{Total: 5, Running: 1, Succeeded: 4}}}},
			""},
		{"last child fires fan_in and the aggregate", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(nil),
			"f": {Status: InProgress, Expanded: true, Children: Children{Total: 2, Succeeded: 2, Outputs: []any{"r0", "r1"}}}}},
			"succeeded:f succeeded:gather dispatch:agg"},
		{"a failed child fails fast", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(nil),
			"f": {Status: InProgress, Expanded: true, Children: Children{Total: 5, Pending: 2, Running: 1, Succeeded: 1, Failed: 1}}}},
			"failed_final:f fail"},
		{"empty fan_out succeeds at once", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(map[string]any{"items": []any{}})}},
			"expand:f:0 succeeded:f succeeded:gather dispatch:agg"},
		{"fan_out over a non-array fails", fanYAML, State{Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(map[string]any{"items": "nope"})}},
			"failed_final:f fail"},
		{"cancelling starts nothing and waits for running work", linearYAML, State{Cancelling: true,
			Nodes: map[string]*NodeState{"S": ok(nil), "a": {Status: InProgress}}}, ""},
		{"cancelling ends once nothing runs", linearYAML, State{Cancelling: true,
			Nodes: map[string]*NodeState{"S": ok(nil), "a": ok(nil)}}, "cancelled"},
		{"cancelling ends cancelled when the work it let finish failed", linearYAML, State{Cancelling: true,
			Nodes: map[string]*NodeState{"S": ok(nil), "a": {Status: FailedFinal}}}, "cancelled"},
		{"a failure while cancelling waits for other running work", fanYAML, State{Cancelling: true,
			Nodes: map[string]*NodeState{"S": ok(nil), "plan": ok(nil),
				"f": {Status: InProgress, Expanded: true, Children: Children{Total: 3, Pending: 1, Running: 1, Failed: 1}}}},
			"failed_final:f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustParse(t, tt.yaml)
			if got := kinds(Evaluate(d, tt.state)); got != tt.want {
				t.Fatalf("actions %q\nwant    %q", got, tt.want)
			}
		})
	}
}

func TestEvaluateRendersParamsAndGathersInOrder(t *testing.T) {
	t.Parallel()
	d := mustParse(t, linearYAML)
	acts := Evaluate(d, State{Inputs: map[string]any{"x": 5.0}})
	if !reflect.DeepEqual(acts[1].Params, map[string]any{"v": 5.0}) {
		t.Fatalf("params %v", acts[1].Params)
	}
	fan := mustParse(t, fanYAML)
	acts = Evaluate(fan, State{Nodes: map[string]*NodeState{"S": {Status: Succeeded}, "plan": {Status: Succeeded},
		"f": {Status: InProgress, Expanded: true, Children: Children{Total: 3, Succeeded: 3, Outputs: []any{"r0", "r1", "r2"}}}}})
	last := acts[len(acts)-1]
	if last.Kind != ActDispatch || !reflect.DeepEqual(last.Params["all"], []any{"r0", "r1", "r2"}) {
		t.Fatalf("aggregate dispatched with %v", last.Params)
	}
	if p := fan.ChildParams("f", nil, nil, "tile-b", 1); !reflect.DeepEqual(p, map[string]any{"item": "tile-b", "i": 1.0}) {
		t.Fatalf("child params %v", p)
	}
}

// A task may take its whole payload from one object input (generated
// workflows whose steps take arbitrary parameters); null values are left out.
func TestWholeObjectParams(t *testing.T) {
	t.Parallel()
	d := mustParse(t, `workflow_id: whole
version: 1
inputs:
  params: {type: object, required: true}
nodes:
  S: {type: start, next: a}
  a: {type: task, handler: h, params: "{{ inputs.params }}", next: E}
  E: {type: end}
`)
	in := map[string]any{"mailbox": "a@b.c", "n": 2.0, "gone": nil, "nested": map[string]any{"k": "v"}}
	acts := Evaluate(d, State{Inputs: map[string]any{"params": in}})
	want := map[string]any{"mailbox": "a@b.c", "n": 2.0, "nested": map[string]any{"k": "v"}}
	if len(acts) < 2 || !reflect.DeepEqual(acts[1].Params, want) {
		t.Fatalf("actions %+v", acts)
	}
}

func TestOnFailurePathRunsAndJobStillFails(t *testing.T) {
	t.Parallel()
	d := mustParse(t, `workflow_id: comp
version: 1
nodes:
  S: {type: start, next: a}
  a: {type: task, handler: h, on_failure: cleanup, next: b}
  b: {type: task, handler: h, next: E}
  cleanup: {type: task, handler: g, next: E}
  E: {type: end}
`)
	ok := &NodeState{Status: Succeeded}
	got := kinds(Evaluate(d, State{Nodes: map[string]*NodeState{"S": ok, "a": {Status: FailedFinal}}}))
	if got != "skipped:b dispatch:cleanup" && got != "dispatch:cleanup skipped:b" {
		t.Fatalf("after failure: %q", got)
	}
	got = kinds(Evaluate(d, State{Nodes: map[string]*NodeState{"S": ok, "a": {Status: FailedFinal}, "b": {Status: Skipped}, "cleanup": ok}}))
	if got != "succeeded:E complete:failed_final" {
		t.Fatalf("after cleanup: %q", got)
	}
	got = kinds(Evaluate(d, State{Nodes: map[string]*NodeState{"S": ok, "a": ok}}))
	if got != "dispatch:b skipped:cleanup" {
		t.Fatalf("on success: %q", got)
	}
}

// FuzzEvaluateRandomDAGs builds a random valid DAG (tasks, conditionals,
// fan-outs, fan-ins), runs it to the end with random outcomes, and checks the
// properties the engine relies on.
func FuzzEvaluateRandomDAGs(f *testing.F) {
	for seed := range uint64(40) {
		f.Add(seed, uint8(10), uint8(5))
	}
	f.Fuzz(func(t *testing.T, seed uint64, size uint8, failPercent uint8) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		y := randomDAG(r, 2+int(size)%14)
		d, err := Parse("random.yaml", []byte(y), testCatalog())
		if err != nil {
			t.Fatalf("generated an invalid DAG: %v\n%s", err, y)
		}
		simulate(t, d, r, int(failPercent)%30, y)
	})
}

// randomDAG emits nodes n0..nk in topological order: each points forward, so
// there are no cycles, and n0 is reached from start.
func randomDAG(r *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString("workflow_id: random\nversion: 1\ninputs:\n  items: {type: list, default: [1, 2, 3]}\nnodes:\n  S: {type: start, next: n0}\n")
	for i := range n {
		// Every node leads to its successor, so all are reachable, plus up to
		// k-1 random later nodes.
		targets := func(k int) []string {
			if i == n-1 {
				return []string{"E"}
			}
			out := []string{fmt.Sprintf("n%d", i+1)}
			for j := i + 2; j < n && len(out) < k; j++ {
				if r.IntN(3) == 0 {
					out = append(out, fmt.Sprintf("n%d", j))
				}
			}
			if len(out) < k && r.IntN(4) == 0 {
				out = append(out, "E")
			}
			return out
		}
		switch kind := r.IntN(10); {
		case kind < 5 || i == n-1:
			fmt.Fprintf(&b, "  n%d: {type: task, handler: h, next: [%s]}\n", i, strings.Join(targets(2), ", "))
		case kind < 7:
			ts := targets(3)
			first, def := ts[0], ts[len(ts)-1]
			if r.IntN(2) == 0 {
				first, def = def, first
			}
			fmt.Fprintf(&b, "  n%d:\n    type: conditional\n    condition_field: \"{{ inputs.items }}\"\n    branches:\n      - {condition: \"%s\", next: %s}\n      - {default: true, next: %s}\n",
				i, []string{"< 100", "== nope", "!= x"}[r.IntN(3)], first, def)
		case kind < 9:
			fmt.Fprintf(&b, "  n%d:\n    type: fan_out\n    over: \"{{ inputs.items }}\"\n    max_parallel: %d\n    task: {handler: h}\n    next: [%s]\n",
				i, r.IntN(3), strings.Join(targets(1), ", "))
		default:
			fmt.Fprintf(&b, "  n%d: {type: fan_in, next: [%s]}\n", i, strings.Join(targets(1), ", "))
		}
	}
	b.WriteString("  E: {type: end}\n")
	return b.String()
}

// simulate plays the engine and the workers until the job ends.
func simulate(t *testing.T, d *Definition, r *rand.Rand, failPercent int, src string) {
	st := State{Inputs: map[string]any{"items": []any{1.0, 2.0, 3.0}}, Nodes: map[string]*NodeState{}}
	for _, n := range d.Nodes {
		st.Nodes[n.ID] = &NodeState{Status: Pending}
	}
	everSucceeded := map[string]bool{}
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatalf("job did not terminate\n%s", src)
		}
		actions := Evaluate(d, st)
		ended := false
		for _, a := range actions {
			ns := st.Nodes[a.Node]
			switch a.Kind {
			case ActDispatch:
				checkReady(t, d, st, a.Node, src)
				ns.Status = InProgress
			case ActExpand:
				checkReady(t, d, st, a.Node, src)
				ns.Expanded, ns.Status = true, InProgress
				ns.Children = Children{Total: len(a.Items), Pending: len(a.Items)}
			case ActDispatchChildren:
				if n, _ := d.Node(a.Node); n.MaxParallel > 0 && ns.Children.Running+a.Count > n.MaxParallel {
					t.Fatalf("%s runs %d children, max_parallel %d\n%s", a.Node, ns.Children.Running+a.Count, n.MaxParallel, src)
				}
				if a.Count > ns.Children.Pending {
					t.Fatalf("%s dispatched %d children with %d pending", a.Node, a.Count, ns.Children.Pending)
				}
				ns.Children.Pending -= a.Count
				ns.Children.Running += a.Count
			case ActResolve:
				if n, _ := d.Node(a.Node); n.Type == TypeFanIn && a.Status == Succeeded {
					for _, p := range d.Preds(n.ID) {
						if !st.Nodes[p.ID].Status.Resolved() {
							t.Fatalf("fan_in %s fired before %s was done\n%s", n.ID, p.ID, src)
						}
					}
				}
				if a.Status == Skipped && everSucceeded[a.Node] {
					t.Fatalf("%s skipped after running", a.Node)
				}
				ns.Status, ns.Output = a.Status, a.Output
			case ActFail, ActComplete, ActCancelled:
				ended = true
			}
		}
		if ended {
			return
		}
		// Workers finish some running work.
		progressed := false
		for _, n := range d.Nodes {
			ns := st.Nodes[n.ID]
			switch {
			case n.Type == TypeTask && ns.Status == InProgress && r.IntN(2) == 0:
				ns.Status = Succeeded
				if r.IntN(100) < failPercent {
					ns.Status = FailedFinal
				}
				everSucceeded[n.ID] = ns.Status == Succeeded
				progressed = true
			case n.Type == TypeFanOut && ns.Children.Running > 0:
				ns.Children.Running--
				if r.IntN(100) < failPercent {
					ns.Children.Failed++
				} else {
					ns.Children.Succeeded++
					ns.Children.Outputs = append(ns.Children.Outputs, ns.Children.Succeeded)
				}
				progressed = true
			}
		}
		if !progressed && len(actions) == 0 {
			// Nothing ran and nothing was asked for: only waiting work may remain.
			waiting := false
			for _, ns := range st.Nodes {
				waiting = waiting || ns.Status == InProgress
			}
			if !waiting {
				t.Fatalf("job is stuck: no actions and nothing running\n%s", src)
			}
		}
	}
}

// checkReady fails if a node starts while a predecessor edge is unresolved or
// when no edge into it carried control (a skipped branch).
func checkReady(t *testing.T, d *Definition, st State, id, src string) {
	t.Helper()
	carried := false
	for _, p := range d.Preds(id) {
		ps := st.Nodes[p.ID]
		if !ps.Status.Resolved() {
			t.Fatalf("%s started before %s was done (%s)\n%s", id, p.ID, ps.Status, src)
		}
		if ps.Status == Succeeded {
			if p.Type == TypeConditional {
				out, _ := ps.Output.(map[string]any)
				carried = carried || out["branch"] == id
			} else {
				carried = carried || contains(p.Next, id)
			}
		}
	}
	if !carried {
		t.Fatalf("%s started though no edge into it carried control (skipped branch)\n%s", id, src)
	}
}
