package workflow

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/lucius-platform/lucius/core/internal/braces"
)

// Template is a parameter value: a literal (number, bool, null), a string that
// may contain {{ expression }} references, or a map or list of templates. A
// string that is exactly one reference renders to the referenced value with its
// type (a list stays a list); references inside other text are interpolated.
//
// Expressions: inputs.<name>, nodes.<id>.output, item, index, each optionally
// followed by a path of .field and [n] segments.
//
// The {{ }} syntax is package braces', shared with runbook params; the
// expressions and rendering are this language's own: a runbook variable is a
// bare name rendering to text, and a missing one is an error, while a
// workflow reference walks JSON values, keeps their type and renders missing
// as null. A "}}" before a later "{{" reads as text here (braces.TrailingOnly),
// as it always has; runbook templates refuse it.
type Template struct {
	literal any
	text    []textPart // a string
	whole   *Ref       // a string that is one reference
	mapping map[string]*Template
	list    []*Template
	kind    templateKind
}

type templateKind int

const (
	kindLiteral templateKind = iota
	kindString
	kindMap
	kindList
)

type textPart struct {
	lit string
	ref *Ref
}

// Ref is one {{ expression }}.
type Ref struct {
	// Root is inputs, nodes, item or index.
	Root string
	// Name is the input name or node id (empty for item and index).
	Name string
	// Path follows the root (for nodes, after "output").
	Path []PathElem
	Raw  string
}

// PathElem is one .field or [n] segment.
type PathElem struct {
	Field string
	Index int
	IsIdx bool
}

// ParseTemplate builds a template from a decoded YAML value.
func ParseTemplate(v any) (*Template, error) {
	switch x := v.(type) {
	case string:
		return parseString(x)
	case map[string]any:
		t := &Template{kind: kindMap, mapping: map[string]*Template{}}
		for k, sub := range x {
			st, err := ParseTemplate(sub)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t.mapping[k] = st
		}
		return t, nil
	case []any:
		t := &Template{kind: kindList}
		for i, sub := range x {
			st, err := ParseTemplate(sub)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			t.list = append(t.list, st)
		}
		return t, nil
	case int:
		return &Template{literal: float64(x)}, nil
	case int64:
		return &Template{literal: float64(x)}, nil
	case uint64:
		return &Template{literal: float64(x)}, nil
	case float64, bool, nil:
		return &Template{literal: x}, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}

func parseString(s string) (*Template, error) {
	t := &Template{kind: kindString}
	for piece, err := range braces.Pieces(s, braces.TrailingOnly) {
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		if !piece.IsRef {
			t.text = append(t.text, textPart{lit: piece.Text})
			continue
		}
		ref, err := parseRef(piece.Text)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		t.text = append(t.text, textPart{ref: ref})
	}
	if len(t.text) == 1 && t.text[0].ref != nil {
		t.whole = t.text[0].ref
	}
	return t, nil
}

var segment = regexp.MustCompile(`^(?:\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\])`)

func parseRef(expr string) (*Ref, error) {
	if expr == "" {
		return nil, fmt.Errorf("empty expression")
	}
	r := &Ref{Raw: expr}
	head, rest := expr, ""
	if i := strings.IndexAny(expr, ".["); i >= 0 {
		head, rest = expr[:i], expr[i:]
	}
	path, err := parsePath(rest)
	if err != nil {
		return nil, fmt.Errorf("{{ %s }}: %w", expr, err)
	}
	switch head {
	case "item", "index":
		r.Root, r.Path = head, path
		if head == "index" && len(path) > 0 {
			return nil, fmt.Errorf("{{ %s }}: index has no fields", expr)
		}
	case "inputs":
		if len(path) == 0 || path[0].IsIdx {
			return nil, fmt.Errorf("{{ %s }}: want inputs.<name>", expr)
		}
		r.Root, r.Name, r.Path = "inputs", path[0].Field, path[1:]
	case "nodes":
		if len(path) < 2 || path[0].IsIdx || path[1].IsIdx || path[1].Field != "output" {
			return nil, fmt.Errorf("{{ %s }}: want nodes.<id>.output", expr)
		}
		r.Root, r.Name, r.Path = "nodes", path[0].Field, path[2:]
	default:
		return nil, fmt.Errorf("{{ %s }}: unknown name %q (want inputs, nodes, item or index)", expr, head)
	}
	return r, nil
}

func parsePath(s string) ([]PathElem, error) {
	var out []PathElem
	for s != "" {
		m := segment.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("bad path at %q", s)
		}
		if m[1] != "" {
			out = append(out, PathElem{Field: m[1]})
		} else {
			n, err := strconv.Atoi(m[2])
			if err != nil {
				return nil, err
			}
			out = append(out, PathElem{Index: n, IsIdx: true})
		}
		s = s[len(m[0]):]
	}
	return out, nil
}

// Whole is the reference a template that is exactly one {{ reference }}
// consists of, or nil.
func (t *Template) Whole() *Ref {
	if t == nil || t.kind != kindString {
		return nil
	}
	return t.whole
}

// Refs lists every reference in the template.
func (t *Template) Refs() []*Ref {
	if t == nil {
		return nil
	}
	var out []*Ref
	switch t.kind {
	case kindString:
		for _, p := range t.text {
			if p.ref != nil {
				out = append(out, p.ref)
			}
		}
	case kindMap:
		keys := make([]string, 0, len(t.mapping))
		for k := range t.mapping {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, t.mapping[k].Refs()...)
		}
	case kindList:
		for _, sub := range t.list {
			out = append(out, sub.Refs()...)
		}
	}
	return out
}

// Scope is what references resolve against.
type Scope struct {
	Inputs map[string]any
	// Output returns a node's output (a task's RESULT output, a conditional's
	// decision, a fan-out's or fan-in's array of child outputs).
	Output func(node string) (any, bool)
	// Item and Index are the element of a fan_out child.
	Item  any
	Index int
}

// Render evaluates the template. Missing values render as null (or "" inside text).
func (t *Template) Render(s Scope) any {
	if t == nil {
		return nil
	}
	switch t.kind {
	case kindLiteral:
		return t.literal
	case kindMap:
		out := make(map[string]any, len(t.mapping))
		for k, sub := range t.mapping {
			if v := sub.Render(s); v != nil {
				out[k] = v
			}
		}
		return out
	case kindList:
		out := make([]any, len(t.list))
		for i, sub := range t.list {
			out[i] = sub.Render(s)
		}
		return out
	}
	if t.whole != nil {
		return t.whole.resolve(s)
	}
	var b strings.Builder
	for _, p := range t.text {
		if p.ref == nil {
			b.WriteString(p.lit)
			continue
		}
		b.WriteString(format(p.ref.resolve(s)))
	}
	return b.String()
}

func (r *Ref) resolve(s Scope) any {
	var v any
	switch r.Root {
	case "inputs":
		v = s.Inputs[r.Name]
	case "nodes":
		if s.Output == nil {
			return nil
		}
		out, ok := s.Output(r.Name)
		if !ok {
			return nil
		}
		v = out
	case "item":
		v = s.Item
	case "index":
		return float64(s.Index)
	}
	for _, p := range r.Path {
		switch x := v.(type) {
		case map[string]any:
			if p.IsIdx {
				return nil
			}
			v = x[p.Field]
		case []any:
			if !p.IsIdx || p.Index >= len(x) {
				return nil
			}
			v = x[p.Index]
		default:
			return nil
		}
	}
	return v
}

func format(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// String renders the template's source form, for messages.
func (r *Ref) String() string { return "{{ " + r.Raw + " }}" }
