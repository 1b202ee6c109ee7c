package workflow

import (
	"fmt"
)

// Status is a node's state; the names are the step states of the ledger.
type Status string

// Node states.
const (
	Pending     Status = "PENDING"
	Ready       Status = "READY" // waiting for its service's circuit breaker
	Dispatching Status = "DISPATCHING"
	AwaitingAck Status = "AWAITING_ACK"
	InProgress  Status = "IN_PROGRESS"
	Polling     Status = "POLLING"
	FailedRetry Status = "FAILED_RETRY"
	Succeeded   Status = "SUCCEEDED"
	FailedFinal Status = "FAILED_FINAL"
	Cancelled   Status = "CANCELLED"
	Skipped     Status = "SKIPPED"
)

// Resolved reports whether the node is done (whatever the outcome).
func (s Status) Resolved() bool {
	return s == Succeeded || s == FailedFinal || s == Cancelled || s == Skipped
}

// Running reports whether work for the node is under way (or waiting to be
// retried, or for its service's circuit breaker).
func (s Status) Running() bool {
	return s == Ready || s == Dispatching || s == AwaitingAck || s == InProgress || s == Polling || s == FailedRetry
}

// NodeState is what is known about one node of a job.
type NodeState struct {
	Status Status
	// Output is a task's RESULT output, a conditional's decision
	// ({"branch", "value"}), a fan_out's or fan_in's array of outputs.
	Output any
	// Fan-out nodes only.
	Expanded bool
	Children Children
}

// Children counts a fan_out's children by state.
type Children struct {
	Total, Pending, Running, Succeeded, Failed int
	// Outputs holds the children's outputs in index order; the evaluator needs
	// them once every child succeeded.
	Outputs []any
}

// State is a job as the evaluator sees it.
type State struct {
	Inputs map[string]any
	Nodes  map[string]*NodeState
	// Cancelling: start nothing new; end the job once nothing runs.
	Cancelling bool
}

// ActionKind says what an action asks the engine to do.
type ActionKind int

// Actions.
const (
	// ActDispatch starts a task node with Params.
	ActDispatch ActionKind = iota + 1
	// ActExpand creates a fan_out's children, one per element of Items.
	ActExpand
	// ActDispatchChildren starts the next Count pending children of a fan_out.
	ActDispatchChildren
	// ActResolve records a node's outcome (control nodes; SKIPPED tasks; a
	// fan_out whose children are done).
	ActResolve
	// ActFail ends the job FAILED_FINAL with Reason; what runs may finish.
	ActFail
	// ActComplete ends the job with Status (SUCCEEDED, or FAILED_FINAL after a
	// failure an on_failure path handled).
	ActComplete
	// ActCancelled ends a cancelling job: nothing runs any more.
	ActCancelled
)

// Action is one step the engine applies.
type Action struct {
	Kind   ActionKind
	Node   string
	Params map[string]any
	Items  []any
	Count  int
	Status Status
	Output any
	Reason string
}

// Evaluate returns what moves the job on from state, resolving control nodes
// to a fixpoint. It does not change state. The engine applies the actions
// (in order) in one transaction.
func Evaluate(d *Definition, st State) []Action {
	e := &evaluator{d: d, st: st, work: make([]NodeState, len(d.Nodes)), maxFanOut: d.Limits().MaxFanOut}
	for i, n := range d.Nodes {
		e.work[i] = NodeState{Status: Pending}
		if cur, ok := st.Nodes[n.ID]; ok && cur != nil {
			e.work[i] = *cur
		}
	}
	for e.pass() {
	}
	return e.finish()
}

type evaluator struct {
	d         *Definition
	st        State
	work      []NodeState // by node index
	actions   []Action
	failed    string // reason of an unhandled failure
	handled   []string
	maxFanOut int
}

// state is a node's working state.
func (e *evaluator) state(n *Node) *NodeState { return &e.work[n.index] }

// pass visits the nodes in topological order once; it reports whether
// anything changed, so the caller repeats until nothing does.
func (e *evaluator) pass() bool {
	changed := false
	for _, n := range e.d.order {
		if e.step(n) {
			changed = true
		}
	}
	return changed
}

func (e *evaluator) step(n *Node) bool {
	ns := e.state(n)
	switch {
	case ns.Status == FailedFinal:
		e.noteFailure(n)
		return false
	case ns.Status.Resolved():
		return false
	case n.Type == TypeFanOut && ns.Expanded:
		return e.fanOutProgress(n, ns)
	case ns.Status.Running():
		return false
	case e.stopping():
		// A failing or cancelling job resolves nothing more: what never ran is
		// cancelled by the engine, not skipped (skipped means a branch not taken).
		return false
	}
	// A pending node: its incoming edges decide.
	succeeded, pending := 0, 0
	for _, p := range n.preds {
		switch e.edge(p, n) {
		case Succeeded:
			succeeded++
		case Pending:
			pending++
		}
	}
	if n.Type != TypeStart {
		if pending > 0 {
			return false
		}
		if succeeded == 0 {
			e.resolve(n, Skipped, nil)
			return true
		}
	}
	switch n.Type {
	case TypeStart, TypeEnd:
		e.resolve(n, Succeeded, nil)
	case TypeFanIn:
		e.resolve(n, Succeeded, e.gather(n))
	case TypeConditional:
		value := n.ConditionField.Render(e.scope())
		for _, b := range n.Branches {
			if b.Default || b.Condition.MatchIn(value, e.st.Inputs) {
				e.resolve(n, Succeeded, map[string]any{"branch": b.Next, "value": value})
				return true
			}
		}
		e.fail(fmt.Sprintf("conditional %s: no branch matched value %s", n.ID, format(value)))
		e.resolve(n, FailedFinal, map[string]any{"value": value})
	case TypeTask:
		e.actions = append(e.actions, Action{Kind: ActDispatch, Node: n.ID, Params: renderParams(n.Task, e.scope())})
		ns.Status = Dispatching
	case TypeFanOut:
		items, ok := n.Over.Render(e.scope()).([]any)
		if !ok {
			e.fail(fmt.Sprintf("fan_out %s: %s is not an array", n.ID, n.Over.whole))
			e.resolve(n, FailedFinal, nil)
			return true
		}
		if len(items) > e.maxFanOut {
			e.fail(limitErr("max_fan_out", e.maxFanOut, len(items), "fan_out "+n.ID, "%s has %d items", n.Over.whole, len(items)).Error())
			e.resolve(n, FailedFinal, nil)
			return true
		}
		e.actions = append(e.actions, Action{Kind: ActExpand, Node: n.ID, Items: items})
		ns.Expanded = true
		ns.Children = Children{Total: len(items), Pending: len(items)}
		if len(items) == 0 {
			e.resolve(n, Succeeded, []any{})
			return true
		}
		e.fanOutProgress(n, ns)
	}
	return true
}

// fanOutProgress starts more children within max_parallel, or resolves the
// fan_out once they are done.
func (e *evaluator) fanOutProgress(n *Node, ns *NodeState) bool {
	c := &ns.Children
	switch {
	case c.Failed > 0:
		e.resolve(n, FailedFinal, nil) // fail-fast: the job fails, unstarted children never start
		e.noteFailure(n)
		return true
	case c.Succeeded == c.Total:
		e.resolve(n, Succeeded, c.Outputs)
		return true
	case c.Pending == 0 || e.stopping():
		if ns.Status == Pending {
			ns.Status = InProgress
		}
		return false
	}
	room := c.Pending
	if n.MaxParallel > 0 {
		room = min(room, n.MaxParallel-c.Running)
	}
	if room <= 0 {
		return false
	}
	e.actions = append(e.actions, Action{Kind: ActDispatchChildren, Node: n.ID, Count: room})
	c.Pending -= room
	c.Running += room
	ns.Status = InProgress
	return true
}

// edge is the state of the edge p → n: SUCCEEDED when it carries control,
// SKIPPED when it never will, PENDING while p is unresolved.
func (e *evaluator) edge(p, n *Node) Status {
	ps := e.state(p)
	switch ps.Status {
	case Succeeded:
		if p.Type == TypeConditional {
			if out, _ := ps.Output.(map[string]any); out != nil && out["branch"] == n.ID {
				return Succeeded
			}
			return Skipped
		}
		if p.leadsTo(n.ID) {
			return Succeeded
		}
		return Skipped
	case FailedFinal:
		if p.Type == TypeTask && p.Task.OnFailure == n.ID {
			return Succeeded
		}
		return Skipped
	case Skipped, Cancelled:
		return Skipped
	}
	return Pending
}

// noteFailure records a failed node: handled when an on_failure path takes
// over, otherwise it fails the job.
func (e *evaluator) noteFailure(n *Node) {
	if n.Type == TypeTask && n.Task.OnFailure != "" {
		// Noted once per node: only a FAILED_FINAL node in its first pass gets
		// here with an on_failure path, and the list stays that long at most.
		if !contains(e.handled, n.ID) {
			e.handled = append(e.handled, n.ID)
		}
		return
	}
	e.fail(fmt.Sprintf("%s %s failed", n.Type, n.ID))
}

func (e *evaluator) fail(reason string) {
	if e.failed == "" {
		e.failed = reason
	}
}

func (e *evaluator) stopping() bool { return e.st.Cancelling || e.failed != "" }

func (e *evaluator) resolve(n *Node, s Status, output any) {
	ns := e.state(n)
	ns.Status, ns.Output = s, output
	e.actions = append(e.actions, Action{Kind: ActResolve, Node: n.ID, Status: s, Output: output})
}

// gather is a fan_in's output: what each active upstream node contributes,
// in declaration order; a fan_out contributes its children's outputs in index order.
func (e *evaluator) gather(n *Node) []any {
	out := []any{}
	for _, p := range n.preds {
		ps := e.state(p)
		if e.edge(p, n) != Succeeded {
			continue
		}
		if items, ok := ps.Output.([]any); ok && (p.Type == TypeFanOut || p.Type == TypeFanIn) {
			out = append(out, items...)
		} else {
			out = append(out, ps.Output)
		}
	}
	return out
}

func (e *evaluator) scope() Scope {
	return Scope{Inputs: e.st.Inputs, Output: func(id string) (any, bool) {
		n, ok := e.d.byID[id]
		if !ok || e.work[n.index].Status != Succeeded {
			return nil, false
		}
		return e.work[n.index].Output, true
	}}
}

// renderParams renders a task's params in s; null values are left out.
func renderParams(t *Task, s Scope) map[string]any {
	if t.ParamsFrom != nil {
		obj, _ := t.ParamsFrom.Render(s).(map[string]any)
		out := make(map[string]any, len(obj))
		for k, v := range obj {
			if v != nil {
				out[k] = v
			}
		}
		return out
	}
	out := make(map[string]any, len(t.Params))
	for k, tpl := range t.Params {
		if v := tpl.Render(s); v != nil {
			out[k] = v
		}
	}
	return out
}

// ChildParams renders the params of a fan_out's index-th child.
func (d *Definition) ChildParams(node string, inputs map[string]any, outputs func(string) (any, bool), item any, index int) map[string]any {
	return renderParams(d.byID[node].Task, Scope{Inputs: inputs, Output: outputs, Item: item, Index: index})
}

func (e *evaluator) finish() []Action {
	running := false
	unresolved := false
	for _, n := range e.d.Nodes {
		ns := e.state(n)
		if ns.Status.Running() || (n.Type == TypeFanOut && ns.Children.Running > 0) {
			running = true
		}
		if !ns.Status.Resolved() {
			unresolved = true
		}
	}
	switch {
	case e.st.Cancelling:
		// Cancellation wins over a failure of the work it let finish.
		if !running {
			e.actions = append(e.actions, Action{Kind: ActCancelled, Reason: "cancelled"})
		}
	case e.failed != "":
		e.actions = append(e.actions, Action{Kind: ActFail, Reason: e.failed})
	case !unresolved:
		if len(e.handled) > 0 {
			e.actions = append(e.actions, Action{Kind: ActComplete, Status: FailedFinal,
				Reason: fmt.Sprintf("%s failed; its on_failure path ran", e.handled[0])})
		} else {
			e.actions = append(e.actions, Action{Kind: ActComplete, Status: Succeeded})
		}
	}
	return e.actions
}
