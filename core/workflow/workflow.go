// Package workflow is Lucius's workflow language and its evaluator: DAGs
// declared in YAML (seed 001 §8) with start, end, task, conditional, fan_out and
// fan_in nodes, typed inputs with defaults, parameter templates, per-node retry
// and timeouts. A request type names a workflow; the linear protocols (OCR,
// EMBEDDING, SIS and their compositions) are workflows like any other.
//
// Definitions are validated statically (Parse) before they can run; errors name
// the node and the YAML line and column. Evaluate is a pure function from a
// definition and the state of a job's nodes to the actions that move the job on.
//
// Parameter templates share their {{ }} syntax with runbook params (package
// core/internal/braces reads both) but not their expressions: see Template.
package workflow

import (
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/lucius-platform/lucius/base/retry"
)

// Node types.
const (
	TypeStart       = "start"
	TypeEnd         = "end"
	TypeTask        = "task"
	TypeConditional = "conditional"
	TypeFanOut      = "fan_out"
	TypeFanIn       = "fan_in"
)

// Defaults for task nodes that do not set them.
const (
	DefaultMaxAttempts  = 3
	DefaultAckTimeout   = 30 * time.Second
	DefaultTimeout      = 30 * time.Minute
	DefaultInitialDelay = 2 * time.Second
	DefaultMaxDelay     = 5 * time.Minute
)

var (
	workflowIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	nodeIDPattern     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	handlerPattern    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
	servicePattern    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	inputNamePattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// Definition is a validated workflow.
type Definition struct {
	ID          string
	Name        string
	Version     int
	Description string
	// SLA bounds a job's life: still running after it, the job fails with
	// SLA_EXCEEDED. Zero: the engine's default.
	SLA    time.Duration
	Inputs map[string]Input
	// Nodes in the order the YAML declares them.
	Nodes []*Node
	// Source is the YAML the definition was parsed from.
	Source []byte

	byID   map[string]*Node
	order  []*Node // topological order
	limits Limits
}

// Input declares one workflow input (a field of the command payload).
type Input struct {
	Rule
	// Default is used when the payload does not set the input.
	Default any
}

// Node is one vertex of the DAG.
type Node struct {
	ID          string
	Type        string
	Description string
	// Next lists the nodes after this one (start, task, fan_out, fan_in).
	Next []string
	// Task holds what a task node runs, and what each child of a fan_out runs.
	Task *Task
	// Conditional nodes.
	ConditionField *Template
	Branches       []Branch
	// Fan-out nodes: the array to fan out over, and how many children may run at once (0: all).
	Over        *Template
	MaxParallel int

	line, column int
	index        int             // in Definition.Nodes
	topo         int             // in Definition.order
	preds        []*Node         // incoming edges, in declaration order
	nextSet      map[string]bool // Next as a set, for nodes with many
}

// Task is the work a task node (or a fan_out child) asks a worker to do.
type Task struct {
	// Handler names the step type a worker implements, e.g. OCR.
	Handler string
	// Service is the platform service that owns the handler, e.g. ocr.
	Service string
	// Params are templates rendered into the directive's payload.
	Params map[string]*Template
	// ParamsFrom, when set instead, is one reference whose object value is
	// the whole payload (e.g. "{{ inputs.params }}").
	ParamsFrom *Template
	Timeout    time.Duration
	AckTimeout time.Duration
	// PollInterval, when set, re-dispatches a step that answered POLLING
	// after this long (each poll a new attempt that does not count against
	// Retry); PollTimeout, when set, fails it POLL_TIMEOUT that long after
	// its first POLLING answer. Zero PollInterval: the step waits in POLLING
	// for an explicit poll-check (runbooks).
	PollInterval time.Duration
	PollTimeout  time.Duration
	Retry        Retry
	// OnFailure names the node that runs instead of Next when the task fails for good.
	OnFailure string
}

// MaxPollSeconds bounds poll_interval and poll_timeout (a week).
const MaxPollSeconds = 7 * 24 * 3600

// Retry is a task's retry policy.
type Retry struct {
	MaxAttempts  int
	Exponential  bool
	InitialDelay time.Duration
	MaxDelay     time.Duration
}

// Backoff is the delay before attempt n+1 after attempt n failed retryably.
func (r Retry) Backoff(n int) time.Duration {
	multiplier := 1.0
	if r.Exponential {
		multiplier = 2
	}
	return retry.Delay(r.InitialDelay, r.MaxDelay, multiplier, 0, n-1)
}

// Branch is one outcome of a conditional: taken when Condition holds for the
// condition field's value (and the inputs), or always when Default.
type Branch struct {
	Condition *Condition
	Default   bool
	Next      string
}

// Node returns a node by id.
func (d *Definition) Node(id string) (*Node, bool) {
	n, ok := d.byID[id]
	return n, ok
}

// Preds lists the nodes with an edge into id, in declaration order.
func (d *Definition) Preds(id string) []*Node {
	if n, ok := d.byID[id]; ok {
		return n.preds
	}
	return nil
}

// Limits are the limits the definition was parsed with; the engine applies
// their run-time ones (MaxFanOut, MaxExpansionBytes) to its jobs.
func (d *Definition) Limits() Limits { return d.limits.WithDefaults() }

// leadsTo reports whether to is in n.Next.
func (n *Node) leadsTo(to string) bool {
	if n.nextSet != nil {
		return n.nextSet[to]
	}
	return contains(n.Next, to)
}

// Start is the start node.
func (d *Definition) Start() *Node {
	for _, n := range d.Nodes {
		if n.Type == TypeStart {
			return n
		}
	}
	return nil
}

// Tasks lists the nodes that dispatch work (task and fan_out), in declaration order.
func (d *Definition) Tasks() []*Node {
	var out []*Node
	for _, n := range d.Nodes {
		if n.Type == TypeTask || n.Type == TypeFanOut {
			out = append(out, n)
		}
	}
	return out
}

// Services lists the services owning the definition's tasks.
func (d *Definition) Services() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range d.Tasks() {
		if s := n.Task.Service; !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Key names a definition version, e.g. "raster_processing@2".
func (d *Definition) Key() string { return fmt.Sprintf("%s@%d", d.ID, d.Version) }

// edges returns the nodes a node leads to: Next, branch targets and on_failure.
func (n *Node) edges() []string {
	out := append([]string(nil), n.Next...)
	for _, b := range n.Branches {
		out = append(out, b.Next)
	}
	if n.Task != nil && n.Task.OnFailure != "" && n.Type == TypeTask {
		out = append(out, n.Task.OnFailure)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ChildStepID names the index-th child step of a fan_out node.
func ChildStepID(node string, index int) string { return fmt.Sprintf("%s[%d]", node, index) }
