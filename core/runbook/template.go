package runbook

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lucius-platform/lucius/core/internal/braces"
)

// Params are a step's templated parameters: a mapping whose strings, at any
// depth of nested maps and lists, may contain {{ variable }} references.
// Rendering substitutes the variables' values (text); non-string literals
// (numbers, booleans, null) stay as they are. A nil *Params renders as {}.
type Params struct {
	root *value // a mapping
}

type valueKind int

const (
	kindLiteral valueKind = iota // number, bool or null
	kindText                     // a string, possibly with references
	kindMap
	kindList
)

type value struct {
	kind    valueKind
	literal any      // kindLiteral: int64, float64, bool or nil
	parts   []part   // kindText
	keys    []string // kindMap, in YAML order
	fields  []*value // kindMap, parallel to keys
	items   []*value // kindList
}

// part is literal text or one reference.
type part struct {
	text string
	ref  string // the variable name when this part is a reference
}

var varPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseText splits s into literal text and {{ variable }} references.
func parseText(s string) ([]part, error) {
	var parts []part
	for piece, err := range braces.Pieces(s, braces.Strict) {
		switch {
		case err != nil:
			return nil, err
		case !piece.IsRef:
			parts = append(parts, part{text: piece.Text})
		case piece.Text == "":
			return nil, errors.New("{{ }} names no variable")
		case !varPattern.MatchString(piece.Text):
			return nil, fmt.Errorf("{{ %s }}: want a variable name such as {{ email }} or {{ _batch_id }}", piece.Text)
		default:
			parts = append(parts, part{ref: piece.Text})
		}
	}
	return parts, nil
}

// Vars lists the variables the params refer to, sorted, each once.
func (p *Params) Vars() []string {
	if p == nil {
		return nil
	}
	set := map[string]bool{}
	p.root.walkRefs(func(name string) { set[name] = true })
	return slices.Sorted(maps.Keys(set))
}

func (v *value) walkRefs(fn func(name string)) {
	switch v.kind {
	case kindText:
		for _, pt := range v.parts {
			if pt.ref != "" {
				fn(pt.ref)
			}
		}
	case kindMap:
		for _, f := range v.fields {
			f.walkRefs(fn)
		}
	case kindList:
		for _, it := range v.items {
			it.walkRefs(fn)
		}
	}
}

// Render resolves the params against vars (see MemberVars and BatchVars).
// A variable without a value in vars is an error naming where it is used:
// rendering it empty could send a step to the wrong place.
func (p *Params) Render(vars map[string]string) (map[string]any, error) {
	if p == nil || p.root == nil {
		return map[string]any{}, nil
	}
	var errs []error
	out := p.root.render("params", vars, &errs)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out.(map[string]any), nil
}

func (v *value) render(path string, vars map[string]string, errs *[]error) any {
	switch v.kind {
	case kindLiteral:
		return v.literal
	case kindMap:
		out := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			out[k] = v.fields[i].render(path+"."+k, vars, errs)
		}
		return out
	case kindList:
		out := make([]any, len(v.items))
		for i, it := range v.items {
			out[i] = it.render(path+"["+strconv.Itoa(i)+"]", vars, errs)
		}
		return out
	}
	var b strings.Builder
	for _, pt := range v.parts {
		if pt.ref == "" {
			b.WriteString(pt.text)
			continue
		}
		val, ok := vars[pt.ref]
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s: no value for {{ %s }}", path, pt.ref))
			continue
		}
		b.WriteString(val)
	}
	return b.String()
}
