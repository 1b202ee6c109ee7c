package workflow

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Default limits: generous for hand-written and generated workflows (the
// built-in ones have under 20 nodes), small enough that one definition cannot
// take a process's memory.
const (
	DefaultMaxSourceBytes    = 1 << 20 // the API's own cap on a definition
	DefaultMaxDepth          = 32
	DefaultMaxNodes          = 1000
	DefaultMaxEdges          = 4000
	DefaultMaxFanOut         = 10000
	DefaultMaxExpansionBytes = 16 << 20
)

// Limits bound what a definition may cost. Parse refuses a definition over
// MaxSourceBytes, MaxDepth, MaxNodes or MaxEdges before the work that grows
// with it; MaxFanOut and MaxExpansionBytes bound a job at run time, when a
// fan_out's array is known. A zero field takes its default.
type Limits struct {
	// MaxSourceBytes bounds the YAML source (default 1 MiB).
	MaxSourceBytes int
	// MaxDepth bounds the nesting of YAML maps and lists (default 32).
	MaxDepth int
	// MaxNodes bounds the nodes of a workflow (default 1000).
	MaxNodes int
	// MaxEdges bounds its edges: next entries, branches and on_failure (default 4000).
	MaxEdges int
	// MaxFanOut bounds the children one fan_out may expand into (default 10000);
	// a job whose array is longer fails with the limit named.
	MaxFanOut int
	// MaxExpansionBytes bounds the params one fan_out's children render to,
	// together, in JSON (default 16 MiB): templates such as
	// "{{ inputs.items }}" in a child's params repeat per child.
	MaxExpansionBytes int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxSourceBytes, DefaultMaxSourceBytes)
	def(&l.MaxDepth, DefaultMaxDepth)
	def(&l.MaxNodes, DefaultMaxNodes)
	def(&l.MaxEdges, DefaultMaxEdges)
	def(&l.MaxFanOut, DefaultMaxFanOut)
	def(&l.MaxExpansionBytes, DefaultMaxExpansionBytes)
	return l
}

// Validate reports limits that cannot work.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value int
	}{
		{"max_source_bytes", l.MaxSourceBytes}, {"max_depth", l.MaxDepth}, {"max_nodes", l.MaxNodes},
		{"max_edges", l.MaxEdges}, {"max_fan_out", l.MaxFanOut}, {"max_expansion_bytes", l.MaxExpansionBytes},
	} {
		if f.value < 0 {
			errs = append(errs, fmt.Errorf("workflow limit %s must not be negative, got %d", f.name, f.value))
		}
	}
	l = l.WithDefaults()
	if l.MaxDepth < 4 {
		errs = append(errs, fmt.Errorf("workflow limit max_depth must be at least 4 (a task's params sit at depth 4), got %d", l.MaxDepth))
	}
	if l.MaxNodes < 3 {
		errs = append(errs, fmt.Errorf("workflow limit max_nodes must be at least 3 (start, a task, end), got %d", l.MaxNodes))
	}
	if l.MaxEdges < l.MaxNodes-1 {
		errs = append(errs, fmt.Errorf("workflow limit max_edges (%d) must be at least max_nodes-1 (%d): every node but start needs an edge in", l.MaxEdges, l.MaxNodes-1))
	}
	return errors.Join(errs...)
}

// LimitError says a definition or a job exceeds a limit. Parse returns it
// alone: a definition over a limit is not checked further.
type LimitError struct {
	// Limit names the limit: max_source_bytes, max_depth, max_nodes,
	// max_edges, max_fan_out, max_expansion_bytes, or alias_expansion (YAML
	// aliases may at most double a document's nodes; not configurable).
	Limit string
	// Max is the limit's value; Value what was found (when counting stopped
	// early, the count at which it stopped).
	Max, Value int
	// Where is "file:line:column" of what passed the limit, or the fan_out node's id.
	Where string
	// Msg says what was counted.
	Msg string
}

func (e *LimitError) Error() string { return e.Where + ": " + e.Msg }

func limitErr(limit string, max, value int, where, format string, args ...any) *LimitError {
	msg := fmt.Sprintf(format, args...) + fmt.Sprintf(", more than the limit of %d (%s)", max, limit)
	return &LimitError{Limit: limit, Max: max, Value: value, Where: where, Msg: msg}
}

// aliasFloor is the expanded size every document may reach, however small.
const aliasFloor = 10000

// aliasBound is how many YAML nodes a document of literal nodes may expand
// into through aliases: twice its own, and at least aliasFloor. Anchors for
// shared blocks (a retry policy, common params) stay well within it; an
// alias bomb does not.
func aliasBound(literal int) int { return max(2*literal, aliasFloor) }

// expandedSize counts the YAML nodes under n with aliases expanded, each
// anchor's size computed once; it stops once the count passes limit.
func expandedSize(n *yaml.Node, limit int, memo map[*yaml.Node]int) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if size, ok := memo[n.Alias]; ok {
			if size < 0 { // an anchor containing itself
				return limit + 1
			}
			return size
		}
		memo[n.Alias] = -1
		size := expandedSize(n.Alias, limit, memo)
		memo[n.Alias] = size
		return size
	}
	size := 1
	for _, c := range n.Content {
		if size += expandedSize(c, limit, memo); size > limit {
			return size
		}
	}
	return size
}

// depth returns the nesting depth of YAML collections under n and how many
// YAML nodes it has, stopping as soon as the depth passes limit. Aliases are
// not followed (expandedSize bounds what they add).
func depth(n *yaml.Node, limit int) (deepest, count int, at *yaml.Node) {
	type item struct {
		n *yaml.Node
		d int
	}
	stack := []item{{n, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		count++
		d := it.d
		if it.n.Kind == yaml.MappingNode || it.n.Kind == yaml.SequenceNode {
			d++
		}
		if d > deepest {
			deepest = d
			if d > limit {
				return d, count, it.n
			}
		}
		for _, c := range it.n.Content {
			stack = append(stack, item{c, d})
		}
	}
	return deepest, count, nil
}
