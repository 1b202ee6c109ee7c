// Package yamlnode reads YAML node trees (go.yaml.in/yaml/v3) for the
// workflow and runbook parsers: mapping lookups, a mapping checked against the
// keys allowed in it, typed scalar reads, and problems reported as
// "file:line:column: message", the one format both languages promise.
//
// What each language decides for itself stays in its parser: how a document
// is decoded (workflow decodes into structs, runbook reads nodes with
// Fields), YAML anchors (workflow bounds their expansion, runbook refuses
// them), and how a value that is not a mapping is worded.
package yamlnode

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Where is "file:line:column" of n; a nil n is at 0:0.
func Where(file string, n *yaml.Node) string {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	return fmt.Sprintf("%s:%d:%d", file, line, col)
}

// Problems collects the problems of one parse, each at a node's position.
type Problems struct {
	File string
	// Max bounds the problems kept: a broken megabyte of YAML should not
	// produce a megabyte of errors. Zero keeps every problem.
	Max   int
	errs  []error
	found int
	last  *yaml.Node // where the last problem found is
}

// At reports a problem at n.
func (p *Problems) At(n *yaml.Node, format string, args ...any) {
	p.found++
	p.last = n
	if p.Max == 0 || p.found <= p.Max {
		p.errs = append(p.errs, fmt.Errorf("%s: %s", Where(p.File, n), fmt.Sprintf(format, args...)))
	}
}

// Len is how many problems were found.
func (p *Problems) Len() int { return p.found }

// Err joins the problems found, one a line, or returns nil. Past Max, the
// last line counts the rest, at the last one's position.
func (p *Problems) Err() error {
	if p.Max > 0 && p.found > p.Max {
		more := fmt.Errorf("%s: and %d more problems", Where(p.File, p.last), p.found-p.Max)
		return errors.Join(append(p.errs, more)...)
	}
	return errors.Join(p.errs...)
}

// Document returns the content of a document node, or n when it is not one.
func Document(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return n.Content[0]
	}
	return n
}

// Pairs yields the keys and values of mapping m in order; nothing when m
// is not a mapping.
func Pairs(m *yaml.Node) iter.Seq2[*yaml.Node, *yaml.Node] {
	return func(yield func(k, v *yaml.Node) bool) {
		if m == nil || m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !yield(m.Content[i], m.Content[i+1]) {
				return
			}
		}
	}
}

// Key returns the key node of key in mapping m (the first, if repeated), or
// nil when m is not a mapping or lacks key.
func Key(m *yaml.Node, key string) *yaml.Node {
	k, _ := lookup(m, key)
	return k
}

// Value returns the value node of key in mapping m, or nil when m is not a
// mapping or lacks key.
func Value(m *yaml.Node, key string) *yaml.Node {
	_, v := lookup(m, key)
	return v
}

func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	for k, v := range Pairs(m) {
		if k.Value == key {
			return k, v
		}
	}
	return nil, nil
}

// Fields is a mapping whose keys were checked against those allowed in it.
// Its typed reads report a value of the wrong type, prefixed with Label.
type Fields struct {
	// Node is the mapping.
	Node *yaml.Node
	// Label prefixes messages: "step send-notice", "phases[1]", "node a".
	Label    string
	problems *Problems
	keys     map[string]*yaml.Node
	vals     map[string]*yaml.Node
}

// ReadFields reads n as a mapping whose keys are among allowed. It reports
// a key that is a map or a list, one not allowed and one given twice (the
// first counts); it returns ok false, reporting nothing, when n is not a
// mapping: each language words that itself.
func ReadFields(problems *Problems, n *yaml.Node, label string, allowed ...string) (f Fields, ok bool) {
	f = Fields{Node: n, Label: label, problems: problems, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		return f, false
	}
	for k, v := range Pairs(n) {
		if k.Kind == yaml.MappingNode || k.Kind == yaml.SequenceNode {
			problems.At(k, "%s: keys must be plain names", label)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			problems.At(k, "%s: field %q is not allowed here (allowed: %s)", label, k.Value, strings.Join(allowed, ", "))
			continue
		}
		if first, dup := f.keys[k.Value]; dup {
			problems.At(k, "%s: field %q is given twice (first at line %d)", label, k.Value, first.Line)
			continue
		}
		f.keys[k.Value], f.vals[k.Value] = k, v
	}
	return f, true
}

// Errorf reports a problem at n, prefixed with the label.
func (f Fields) Errorf(at *yaml.Node, format string, args ...any) {
	f.problems.At(at, "%s: %s", f.Label, fmt.Sprintf(format, args...))
}

// Key returns the key node of key, or nil when absent.
func (f Fields) Key(key string) *yaml.Node { return f.keys[key] }

// Value returns the value node of key, or nil when absent or null.
func (f Fields) Value(key string) *yaml.Node {
	v := f.vals[key]
	if v == nil || v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil
	}
	return v
}

// ValueOr returns the value node of key (null included), or the mapping
// when key is absent: where to report a problem with key.
func (f Fields) ValueOr(key string) *yaml.Node {
	if v := f.vals[key]; v != nil {
		return v
	}
	return f.Node
}

// missing reports a required key that is absent (at the mapping) or null
// (at its key).
func (f Fields) missing(key string) {
	at := f.Node
	if k := f.keys[key]; k != nil {
		at = k
	}
	f.Errorf(at, "%s is required", key)
}

// String reads a string; "" when absent or null. The node returned is
// where to report a problem with the value: the value, or the mapping.
func (f Fields) String(key string, required bool) (string, *yaml.Node) {
	v := f.Value(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return "", f.Node
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		f.Errorf(v, "%s must be a string", key)
		return "", v
	}
	return v.Value, v
}

// Int reads an integer within [lo, hi]; ok is false when it is absent, null
// or reported.
func (f Fields) Int(key string, required bool, lo, hi int) (n int, ok bool) {
	v := f.Value(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return 0, false
	}
	var i int64
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&i) != nil {
		f.Errorf(v, "%s must be an integer", key)
		return 0, false
	}
	if i < int64(lo) || i > int64(hi) {
		f.Errorf(v, "%s must be between %d and %d", key, lo, hi)
		return 0, false
	}
	return int(i), true
}

// Bool reads true or false; false when absent or null.
func (f Fields) Bool(key string) bool {
	v := f.Value(key)
	if v == nil {
		return false
	}
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		f.Errorf(v, "%s must be true or false", key)
		return false
	}
	return b
}

// List reads a sequence's items; nil when absent or null.
func (f Fields) List(key string) []*yaml.Node {
	v := f.Value(key)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		f.Errorf(v, "%s must be a list", key)
		return nil
	}
	return v.Content
}
