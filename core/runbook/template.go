package runbook

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
	rest := s
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			if strings.Contains(rest, "}}") {
				return nil, errors.New("'}}' without '{{'")
			}
			if rest != "" {
				parts = append(parts, part{text: rest})
			}
			return parts, nil
		}
		if strings.Contains(rest[:open], "}}") {
			return nil, errors.New("'}}' without '{{'")
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			return nil, errors.New("'{{' is not closed")
		}
		if open > 0 {
			parts = append(parts, part{text: rest[:open]})
		}
		expr := strings.TrimSpace(rest[open+2 : open+2+end])
		switch {
		case expr == "":
			return nil, errors.New("{{ }} names no variable")
		case !varPattern.MatchString(expr):
			return nil, fmt.Errorf("{{ %s }}: want a variable name such as {{ email }} or {{ _batch_id }}", expr)
		}
		parts = append(parts, part{ref: expr})
		rest = rest[open+2+end+2:]
	}
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
