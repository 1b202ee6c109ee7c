package workflow

import (
	"bytes"
	"fmt"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lucius-platform/lucius/core/internal/yamlnode"
)

// Catalog says which handlers exist and which service owns each.
type Catalog interface {
	// HandlerService returns the service owning handler, or false if unknown.
	HandlerService(handler string) (string, bool)
}

type rawDef struct {
	WorkflowID  string              `yaml:"workflow_id"`
	Name        string              `yaml:"name"`
	Version     int                 `yaml:"version"`
	Description string              `yaml:"description"`
	SLASeconds  int                 `yaml:"sla_seconds"`
	Inputs      map[string]rawInput `yaml:"inputs"`
	Nodes       yaml.Node           `yaml:"nodes"`
}

type rawInput struct {
	Rule    `yaml:",inline"`
	Default any `yaml:"default"`
}

// rawNode holds every field any node type may have; which are allowed per
// type is checked separately so an error can point at the offending key.
type rawNode struct {
	Type              string      `yaml:"type"`
	Description       string      `yaml:"description"`
	Next              yaml.Node   `yaml:"next"`
	Handler           string      `yaml:"handler"`
	Service           string      `yaml:"service"`
	Queue             string      `yaml:"queue"`  // seed 001's name for service
	Params            any         `yaml:"params"` // a map of templates, or one template naming an object
	TimeoutSeconds    int         `yaml:"timeout_seconds"`
	AckTimeoutSeconds int         `yaml:"ack_timeout_seconds"`
	PollInterval      int         `yaml:"poll_interval"` // seconds
	PollTimeout       int         `yaml:"poll_timeout"`  // seconds
	Retry             *rawRetry   `yaml:"retry"`
	OnFailure         string      `yaml:"on_failure"`
	ConditionField    string      `yaml:"condition_field"`
	Branches          []rawBranch `yaml:"branches"`
	Over              string      `yaml:"over"`
	MaxParallel       int         `yaml:"max_parallel"`
	Task              *rawNode    `yaml:"task"`
}

type rawRetry struct {
	MaxAttempts         int    `yaml:"max_attempts"`
	Backoff             string `yaml:"backoff"`
	InitialDelaySeconds int    `yaml:"initial_delay_seconds"`
	MaxDelaySeconds     int    `yaml:"max_delay_seconds"`
}

type rawBranch struct {
	Condition *string `yaml:"condition"`
	When      *string `yaml:"when"`
	Default   bool    `yaml:"default"`
	Next      string  `yaml:"next"`
}

var allowedKeys = map[string][]string{
	TypeStart:       {"type", "description", "next"},
	TypeEnd:         {"type", "description"},
	TypeTask:        {"type", "description", "next", "handler", "service", "queue", "params", "timeout_seconds", "ack_timeout_seconds", "poll_interval", "poll_timeout", "retry", "on_failure"},
	TypeConditional: {"type", "description", "condition_field", "branches"},
	TypeFanOut:      {"type", "description", "next", "over", "max_parallel", "task"},
	TypeFanIn:       {"type", "description", "next"},
	"fan_out.task":  {"handler", "service", "queue", "params", "timeout_seconds", "ack_timeout_seconds", "poll_interval", "poll_timeout", "retry", "description"},
}

// Parse decodes and validates a definition within the default Limits.
func Parse(file string, data []byte, catalog Catalog) (*Definition, error) {
	return ParseWithLimits(file, data, catalog, Limits{})
}

// ParseWithLimits decodes and validates a definition. Every problem is
// reported, each prefixed with file:line:column and, where it concerns a node,
// the node's id. A definition over a limit is refused with a *LimitError
// alone, found by counting before the work that grows with the definition.
// Parsing and validation cost time and memory linear in the definition's
// size, except the check that each {{ nodes.X.output }} names an upstream
// node: a search upstream from each referring node, pruned to the nodes
// between X and it in topological order.
func ParseWithLimits(file string, data []byte, catalog Catalog, limits Limits) (*Definition, error) {
	limits = limits.WithDefaults()
	if len(data) > limits.MaxSourceBytes {
		return nil, limitErr("max_source_bytes", limits.MaxSourceBytes, len(data), file+":1:1",
			"the definition is %d bytes", len(data))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := checkSize(file, &root, limits); err != nil {
		return nil, err
	}
	var raw rawDef
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p := &parser{problems: yamlnode.Problems{File: file}, root: &root, catalog: catalog,
		def: &Definition{ID: raw.WorkflowID, Name: raw.Name, Version: raw.Version, Description: raw.Description,
			Inputs: map[string]Input{}, Source: data, limits: limits}}
	p.header(&raw)
	p.inputs(&raw)
	p.nodes(&raw)
	if p.problems.Len() == 0 {
		p.graph()
	}
	if p.problems.Len() == 0 {
		p.templates()
	}
	if err := p.problems.Err(); err != nil {
		return nil, err
	}
	return p.def, nil
}

// checkSize counts what Limits bound in the YAML tree, before it is decoded
// further: nesting depth, nodes and edges.
func checkSize(file string, root *yaml.Node, l Limits) error {
	at := func(n *yaml.Node) string { return yamlnode.Where(file, n) }
	d, literal, deep := depth(root, l.MaxDepth)
	if deep != nil {
		return limitErr("max_depth", l.MaxDepth, d, at(deep), "YAML maps and lists nest %d deep here", d)
	}
	bound := aliasBound(literal)
	if size := expandedSize(root, bound, map[*yaml.Node]int{}); size > bound {
		return limitErr("alias_expansion", bound, size, file+":1:1",
			"YAML aliases expand the document's %d nodes to at least %d", literal, size)
	}
	nodes := yamlnode.Value(yamlnode.Document(root), "nodes")
	if nodes == nil || nodes.Kind != yaml.MappingNode {
		return nil // reported by the parser
	}
	if n := len(nodes.Content) / 2; n > l.MaxNodes {
		return limitErr("max_nodes", l.MaxNodes, n, at(nodes.Content[2*l.MaxNodes]), "the workflow has %d nodes", n)
	}
	edges := 0
	for i := 1; i < len(nodes.Content); i += 2 {
		for _, key := range []string{"next", "branches", "on_failure"} {
			v := yamlnode.Value(nodes.Content[i], key)
			if v == nil {
				continue
			}
			switch v.Kind {
			case yaml.ScalarNode:
				edges++
			case yaml.SequenceNode:
				edges += len(v.Content)
			}
		}
		if edges > l.MaxEdges {
			return limitErr("max_edges", l.MaxEdges, edges, at(nodes.Content[i-1]),
				"the workflow has %d edges (next, branches, on_failure) by node %s", edges, nodes.Content[i-1].Value)
		}
	}
	return nil
}

type parser struct {
	problems yamlnode.Problems
	root     *yaml.Node
	catalog  Catalog
	def      *Definition
	// keyNodes holds each node's key position, valueNodes its mapping.
	keyNodes   map[string]*yaml.Node
	valueNodes map[string]*yaml.Node
}

// nodeErr reports a problem of a node, at one of its keys when given.
func (p *parser) nodeErr(id, key, format string, args ...any) {
	at := p.keyNodes[id]
	if v := p.valueNodes[id]; v != nil && key != "" {
		if k := yamlnode.Key(v, key); k != nil {
			at = k
		}
	}
	p.problems.At(at, "node %s: %s", id, fmt.Sprintf(format, args...))
}

// top returns the key node of a top-level key, or the document's mapping
// when it is absent: where to report a problem with key.
func (p *parser) top(key string) *yaml.Node {
	doc := yamlnode.Document(p.root)
	if k := yamlnode.Key(doc, key); k != nil {
		return k
	}
	return doc
}

func (p *parser) header(raw *rawDef) {
	if !workflowIDPattern.MatchString(raw.WorkflowID) {
		p.problems.At(p.top("workflow_id"), "workflow_id %q must match %s", raw.WorkflowID, workflowIDPattern)
	}
	if raw.Version < 1 {
		p.problems.At(p.top("version"), "version must be 1 or more")
	}
	if raw.SLASeconds < 0 || raw.SLASeconds > 90*24*3600 {
		p.problems.At(p.top("sla_seconds"), "sla_seconds must be between 1 and 7776000 (90 days)")
	}
	p.def.SLA = time.Duration(raw.SLASeconds) * time.Second
}

func (p *parser) inputs(raw *rawDef) {
	inputsNode := yamlnode.Value(yamlnode.Document(p.root), "inputs")
	names := make([]string, 0, len(raw.Inputs))
	for n := range raw.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		in := raw.Inputs[name]
		at := yamlnode.Key(inputsNode, name)
		if !inputNamePattern.MatchString(name) {
			p.problems.At(at, "input %q: name must match %s", name, inputNamePattern)
		}
		if problem := in.Rule.check(); problem != "" {
			p.problems.At(at, "input %s: %s", name, problem)
			continue
		}
		def := normalize(in.Default)
		if def != nil {
			if vs := in.Rule.validate("default", def); len(vs) > 0 {
				p.problems.At(at, "input %s: default %s", name, vs[0].Description)
			}
		}
		p.def.Inputs[name] = Input{Rule: in.Rule, Default: def}
	}
}

func (p *parser) nodes(raw *rawDef) {
	m := &raw.Nodes
	size := len(m.Content) / 2
	p.keyNodes, p.valueNodes = make(map[string]*yaml.Node, size), make(map[string]*yaml.Node, size)
	p.def.byID = make(map[string]*Node, size)
	if m.Kind != yaml.MappingNode || len(m.Content) == 0 {
		p.problems.At(p.top("nodes"), "nodes must be a mapping of node ids to nodes")
		return
	}
	for key, val := range yamlnode.Pairs(m) {
		id := key.Value
		if _, dup := p.keyNodes[id]; dup {
			p.problems.At(key, "node %s is defined twice", id)
			continue
		}
		p.keyNodes[id], p.valueNodes[id] = key, val
		if !nodeIDPattern.MatchString(id) {
			p.problems.At(key, "node id %q must match %s", id, nodeIDPattern)
		}
		var rn rawNode
		if err := val.Decode(&rn); err != nil {
			p.problems.At(key, "node %s: %v", id, err)
			continue
		}
		n := &Node{ID: id, Type: rn.Type, Description: rn.Description, line: key.Line, column: key.Column}
		allowed, ok := allowedKeys[rn.Type]
		if !ok {
			p.nodeErr(id, "type", "unknown type %q (want start, end, task, conditional, fan_out or fan_in)", rn.Type)
			continue
		}
		p.unknownKeys(id, val, allowed)
		n.Next = p.next(id, &rn.Next)
		switch rn.Type {
		case TypeTask:
			n.Task = p.task(id, &rn)
		case TypeConditional:
			p.conditional(id, n, &rn)
		case TypeFanOut:
			p.fanOut(id, val, n, &rn)
		}
		n.index = len(p.def.Nodes)
		p.def.Nodes = append(p.def.Nodes, n)
		p.def.byID[id] = n
	}
}

// unknownKeys reports the keys of a node's mapping that are not allowed.
func (p *parser) unknownKeys(id string, m *yaml.Node, allowed []string) {
	if m == nil || m.Kind != yaml.MappingNode {
		p.problems.At(m, "node %s: must be a mapping", id)
		return
	}
	yamlnode.ReadFields(&p.problems, m, "node "+id, allowed...)
}

func (p *parser) next(id string, n *yaml.Node) []string {
	switch n.Kind {
	case 0:
		return nil
	case yaml.ScalarNode:
		return []string{n.Value}
	case yaml.SequenceNode:
		var out []string
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				p.problems.At(c, "node %s: next must list node ids", id)
				continue
			}
			out = append(out, c.Value)
		}
		return out
	}
	p.problems.At(n, "node %s: next must be a node id or a list of node ids", id)
	return nil
}

func (p *parser) task(id string, rn *rawNode) *Task {
	t := &Task{Handler: rn.Handler, Service: rn.Service, OnFailure: rn.OnFailure, Params: map[string]*Template{}}
	if t.Service == "" {
		t.Service = rn.Queue
	}
	if !handlerPattern.MatchString(t.Handler) {
		p.nodeErr(id, "handler", "handler %q must match %s", t.Handler, handlerPattern)
	} else if p.catalog != nil {
		owner, known := p.catalog.HandlerService(t.Handler)
		switch {
		case !known:
			p.nodeErr(id, "handler", "unknown handler %q", t.Handler)
		case t.Service == "":
			t.Service = owner
		case t.Service != owner:
			p.nodeErr(id, "service", "handler %s is owned by service %s, not %s", t.Handler, owner, t.Service)
		}
	}
	if t.Service != "" && !servicePattern.MatchString(t.Service) {
		p.nodeErr(id, "service", "service %q must match %s", t.Service, servicePattern)
	} else if t.Service == "" && p.catalog == nil {
		p.nodeErr(id, "handler", "service is required")
	}
	switch params := rn.Params.(type) {
	case nil:
	case string:
		// The whole payload from one reference, e.g. "{{ inputs.params }}":
		// for generated workflows whose steps take arbitrary parameters.
		tpl, err := ParseTemplate(params)
		if err != nil || tpl.Whole() == nil {
			p.nodeErr(id, "params", "params must be a map, or one {{ reference }} to an object")
			break
		}
		t.ParamsFrom = tpl
	case map[string]any:
		keys := make([]string, 0, len(params))
		for k := range params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tpl, err := ParseTemplate(normalize(params[k]))
			if err != nil {
				p.nodeErr(id, "params", "param %s: %v", k, err)
				continue
			}
			t.Params[k] = tpl
		}
	default:
		p.nodeErr(id, "params", "params must be a map, or one {{ reference }} to an object")
	}
	t.Timeout = seconds(rn.TimeoutSeconds, DefaultTimeout)
	t.AckTimeout = seconds(rn.AckTimeoutSeconds, DefaultAckTimeout)
	if rn.TimeoutSeconds < 0 || rn.TimeoutSeconds > 7*24*3600 {
		p.nodeErr(id, "timeout_seconds", "timeout_seconds must be between 1 and 604800")
	}
	if rn.AckTimeoutSeconds < 0 || rn.AckTimeoutSeconds > 3600 {
		p.nodeErr(id, "ack_timeout_seconds", "ack_timeout_seconds must be between 1 and 3600")
	}
	p.pollSettings(id, rn, t)
	t.Retry = Retry{MaxAttempts: DefaultMaxAttempts, Exponential: true, InitialDelay: DefaultInitialDelay, MaxDelay: DefaultMaxDelay}
	if r := rn.Retry; r != nil {
		if r.MaxAttempts != 0 {
			t.Retry.MaxAttempts = r.MaxAttempts
		}
		switch r.Backoff {
		case "", "exponential":
		case "fixed":
			t.Retry.Exponential = false
		default:
			p.nodeErr(id, "retry", "retry.backoff %q must be fixed or exponential", r.Backoff)
		}
		t.Retry.InitialDelay = seconds(r.InitialDelaySeconds, DefaultInitialDelay)
		t.Retry.MaxDelay = seconds(r.MaxDelaySeconds, max(DefaultMaxDelay, t.Retry.InitialDelay))
		if t.Retry.MaxAttempts < 1 || t.Retry.MaxAttempts > 20 {
			p.nodeErr(id, "retry", "retry.max_attempts must be between 1 and 20")
		}
		if r.InitialDelaySeconds < 0 || r.MaxDelaySeconds < 0 || t.Retry.MaxDelay < t.Retry.InitialDelay {
			p.nodeErr(id, "retry", "retry delays must be positive and max_delay_seconds at least initial_delay_seconds")
		}
	}
	return t
}

func (p *parser) conditional(id string, n *Node, rn *rawNode) {
	if rn.ConditionField == "" {
		p.nodeErr(id, "type", "a conditional needs condition_field")
	} else if tpl, err := ParseTemplate(rn.ConditionField); err != nil {
		p.nodeErr(id, "condition_field", "%v", err)
	} else {
		n.ConditionField = tpl
	}
	if len(rn.Branches) == 0 {
		p.nodeErr(id, "type", "a conditional needs branches")
	}
	defaults := 0
	for i, b := range rn.Branches {
		if b.Next == "" {
			p.nodeErr(id, "branches", "branch %d has no next", i)
		}
		switch {
		case b.Condition != nil && b.When != nil:
			p.nodeErr(id, "branches", "branch %d has both condition and when: keep one", i)
		case b.Default && (b.Condition != nil || b.When != nil):
			p.nodeErr(id, "branches", "branch %d has both a condition and default", i)
		case b.Default:
			defaults++
			if i != len(rn.Branches)-1 {
				p.nodeErr(id, "branches", "the default branch must come last")
			}
			n.Branches = append(n.Branches, Branch{Default: true, Next: b.Next})
		case b.Condition != nil || b.When != nil:
			var c *Condition
			var err error
			if b.When != nil {
				c, err = ParseWhen(*b.When)
			} else {
				c, err = ParseCondition(*b.Condition)
			}
			if err != nil {
				p.nodeErr(id, "branches", "branch %d: %v", i, err)
				continue
			}
			n.Branches = append(n.Branches, Branch{Condition: c, Next: b.Next})
		default:
			p.nodeErr(id, "branches", "branch %d needs a condition, a when or default: true", i)
		}
	}
	if defaults > 1 {
		p.nodeErr(id, "branches", "only one branch may be the default")
	}
}

func (p *parser) fanOut(id string, val *yaml.Node, n *Node, rn *rawNode) {
	if rn.Over == "" {
		p.nodeErr(id, "type", "a fan_out needs over (the array to fan out over)")
	} else if tpl, err := ParseTemplate(rn.Over); err != nil {
		p.nodeErr(id, "over", "%v", err)
	} else if tpl.whole == nil {
		p.nodeErr(id, "over", "over must be a single reference such as {{ inputs.items }}")
	} else {
		n.Over = tpl
	}
	if rn.MaxParallel < 0 {
		p.nodeErr(id, "max_parallel", "max_parallel must not be negative")
	}
	n.MaxParallel = rn.MaxParallel
	if rn.Task == nil {
		p.nodeErr(id, "type", "a fan_out needs task (what each child runs)")
		return
	}
	taskNode := yamlnode.Value(val, "task") // nil when val is an alias
	p.unknownKeys(id+".task", taskNode, allowedKeys["fan_out.task"])
	n.Task = p.task(id, rn.Task)
}

// graph checks the shape: one start, some end, edges that resolve, no
// cycles, every node reachable from start; and computes the topological order.
func (p *parser) graph() {
	d := p.def
	var starts, ends []*Node
	for _, n := range d.Nodes {
		switch n.Type {
		case TypeStart:
			starts = append(starts, n)
		case TypeEnd:
			ends = append(ends, n)
			if len(n.Next) > 0 {
				p.nodeErr(n.ID, "next", "an end node has no next")
			}
		case TypeConditional:
		default:
			if len(n.Next) == 0 {
				p.nodeErr(n.ID, "type", "a %s node needs next", n.Type)
			}
		}
		if n.Task != nil && n.Task.OnFailure != "" {
			if _, ok := d.byID[n.Task.OnFailure]; !ok {
				p.nodeErr(n.ID, "on_failure", "on_failure names unknown node %q", n.Task.OnFailure)
			}
		}
		for _, to := range n.edges() {
			target, ok := d.byID[to]
			switch {
			case !ok:
				p.nodeErr(n.ID, "next", "leads to unknown node %q", to)
			case target.Type == TypeStart:
				p.nodeErr(n.ID, "next", "leads to the start node %s", to)
			default:
				target.preds = append(target.preds, n)
			}
		}
		if len(n.Next) > nextSetMin {
			n.nextSet = make(map[string]bool, len(n.Next))
			for _, to := range n.Next {
				n.nextSet[to] = true
			}
		}
	}
	if len(starts) != 1 {
		p.problems.At(p.top("nodes"), "a workflow needs exactly one start node, found %d", len(starts))
	}
	if len(ends) == 0 {
		p.problems.At(p.top("nodes"), "a workflow needs at least one end node")
	}
	if p.problems.Len() > 0 {
		return
	}
	// Kahn's algorithm: what is left over sits on a cycle.
	indeg := make([]int, len(d.Nodes))
	queue := make([]*Node, 0, len(d.Nodes))
	for _, n := range d.Nodes {
		if indeg[n.index] = len(n.preds); indeg[n.index] == 0 {
			queue = append(queue, n)
		}
	}
	d.order = make([]*Node, 0, len(d.Nodes))
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		n.topo = len(d.order)
		d.order = append(d.order, n)
		for _, to := range n.edges() {
			t := d.byID[to]
			if indeg[t.index]--; indeg[t.index] == 0 {
				queue = append(queue, t)
			}
		}
	}
	if len(d.order) != len(d.Nodes) {
		for _, n := range d.Nodes {
			if indeg[n.index] > 0 {
				p.nodeErr(n.ID, "", "is part of a cycle")
			}
		}
		return
	}
	// In topological order, a node is reached when start is, or when any
	// predecessor is.
	reached := make([]bool, len(d.Nodes))
	for _, n := range d.order {
		if n == starts[0] {
			reached[n.index] = true
			continue
		}
		for _, pred := range n.preds {
			if reached[pred.index] {
				reached[n.index] = true
				break
			}
		}
	}
	for _, n := range d.Nodes {
		if !reached[n.index] {
			p.nodeErr(n.ID, "", "is not reachable from the start node %s", starts[0].ID)
		}
	}
}

// nextSetMin is the length of a next list from which a node keeps a set of
// it, so the evaluator's edge lookups stay constant-time on wide nodes.
const nextSetMin = 8

// templates checks every reference: inputs must be declared, nodes must be
// upstream, item and index only inside a fan_out's task.
func (p *parser) templates() {
	d := p.def
	up := newUpstream(len(d.Nodes))
	check := func(n *Node, where string, t *Template, childScope bool) {
		for _, r := range t.Refs() {
			switch r.Root {
			case "inputs":
				if _, ok := d.Inputs[r.Name]; !ok {
					p.nodeErr(n.ID, where, "%s refers to undeclared input %q", r, r.Name)
				}
			case "nodes":
				if target, ok := d.byID[r.Name]; !ok {
					p.nodeErr(n.ID, where, "%s refers to unknown node %q", r, r.Name)
				} else if !up.of(target, n) {
					p.nodeErr(n.ID, where, "%s refers to node %s, which is not upstream of %s", r, r.Name, n.ID)
				}
			case "item", "index":
				if !childScope {
					p.nodeErr(n.ID, where, "%s is only available in a fan_out's task", r)
				}
			}
		}
	}
	for _, n := range d.Nodes {
		if n.ConditionField != nil {
			check(n, "condition_field", n.ConditionField, false)
		}
		if n.Over != nil {
			check(n, "over", n.Over, false)
		}
		if n.Task != nil {
			for _, k := range sortedKeys(n.Task.Params) {
				check(n, "params", n.Task.Params[k], n.Type == TypeFanOut)
			}
			if n.Task.ParamsFrom != nil {
				check(n, "params", n.Task.ParamsFrom, n.Type == TypeFanOut)
			}
		}
	}
}

// upstream answers "is a upstream of n?" by searching n's predecessors
// backwards, skipping nodes before a in topological order (they cannot lie on
// a path from a). The visited marks are reused between searches, so a check
// allocates nothing once the queue has grown; a reference to a nearby node
// costs a few steps, one to a distant node at most the nodes between them.
type upstream struct {
	mark  []int // search number that visited a node, by index
	n     int   // the current search's number
	queue []*Node
	last  *Node          // the node the last search started from
	found map[*Node]bool // its answers so far
}

func newUpstream(nodes int) *upstream { return &upstream{mark: make([]int, nodes)} }

func (u *upstream) of(a, n *Node) bool {
	if a.topo >= n.topo {
		return false
	}
	if u.last != n {
		u.last, u.found = n, map[*Node]bool{}
	} else if ok, seen := u.found[a]; seen {
		return ok
	}
	u.n++
	u.queue = append(u.queue[:0], n)
	u.mark[n.index] = u.n
	found := false
	for len(u.queue) > 0 && !found {
		cur := u.queue[len(u.queue)-1]
		u.queue = u.queue[:len(u.queue)-1]
		for _, pred := range cur.preds {
			if pred == a {
				found = true
				break
			}
			if pred.topo > a.topo && u.mark[pred.index] != u.n {
				u.mark[pred.index] = u.n
				u.queue = append(u.queue, pred)
			}
		}
	}
	u.found[a] = found
	return found
}

func seconds(n int, def time.Duration) time.Duration {
	if n <= 0 {
		return def
	}
	return time.Duration(n) * time.Second
}

// normalize turns YAML-decoded values into their JSON shapes (float64
// numbers, map[string]any), as payloads and outputs have.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, sub := range x {
			out[k] = normalize(sub)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, sub := range x {
			out[i] = normalize(sub)
		}
		return out
	}
	return normalizeScalar(v)
}

// pollSettings reads a task's polling: poll_interval seconds between the
// dispatches of a step that answers POLLING, and poll_timeout seconds after
// its first POLLING answer when it fails POLL_TIMEOUT. Without poll_interval
// a POLLING step waits for an explicit poll-check (runbooks).
func (p *parser) pollSettings(id string, rn *rawNode, t *Task) {
	switch {
	case rn.PollInterval < 0 || rn.PollInterval > MaxPollSeconds:
		p.nodeErr(id, "poll_interval", "poll_interval must be between 1 and %d seconds", MaxPollSeconds)
	case rn.PollTimeout < 0 || rn.PollTimeout > MaxPollSeconds:
		p.nodeErr(id, "poll_timeout", "poll_timeout must be between 1 and %d seconds", MaxPollSeconds)
	case rn.PollTimeout > 0 && rn.PollInterval == 0:
		p.nodeErr(id, "poll_timeout", "poll_timeout needs poll_interval")
	case rn.PollTimeout > 0 && rn.PollTimeout < rn.PollInterval:
		p.nodeErr(id, "poll_timeout", "poll_timeout (%d) must be at least poll_interval (%d)", rn.PollTimeout, rn.PollInterval)
	default:
		t.PollInterval = time.Duration(rn.PollInterval) * time.Second
		t.PollTimeout = time.Duration(rn.PollTimeout) * time.Second
	}
}
