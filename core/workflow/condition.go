package workflow

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Condition compares a conditional's field value: "< 100", "<= 5", "> 1.5",
// ">= 10", "== ready", "!= 0", "in [small, medium]", or a bare value meaning
// equality. Numbers compare numerically (numeric strings count as numbers);
// ordering comparisons never match non-numbers; equality otherwise compares the
// values' text.
type Condition struct {
	Op    string // <, <=, >, >=, ==, !=, in
	Value any
	List  []any
	Raw   string
}

// ParseCondition reads a condition.
func ParseCondition(raw string) (*Condition, error) {
	s := strings.TrimSpace(raw)
	c := &Condition{Raw: raw}
	for _, op := range []string{"<=", ">=", "==", "!=", "<", ">"} {
		if strings.HasPrefix(s, op) {
			c.Op = op
			s = strings.TrimSpace(s[len(op):])
			break
		}
	}
	if c.Op == "" && (strings.HasPrefix(s, "in ") || strings.HasPrefix(s, "in[")) {
		c.Op = "in"
		var list []any
		if err := yaml.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(s, "in"))), &list); err != nil || list == nil {
			return nil, fmt.Errorf("condition %q: want in [a, b, …]", raw)
		}
		for i, v := range list {
			list[i] = normalizeScalar(v)
		}
		c.List = list
		return c, nil
	}
	if c.Op == "" {
		c.Op = "=="
	}
	if s == "" {
		return nil, fmt.Errorf("condition %q: missing value", raw)
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("condition %q: %v", raw, err)
	}
	switch v.(type) {
	case map[string]any, []any:
		return nil, fmt.Errorf("condition %q: compare with a single value", raw)
	}
	c.Value = normalizeScalar(v)
	if _, numeric := number(c.Value); !numeric && c.Op != "==" && c.Op != "!=" {
		return nil, fmt.Errorf("condition %q: %s needs a number", raw, c.Op)
	}
	return c, nil
}

// Match reports whether v satisfies the condition.
func (c *Condition) Match(v any) bool {
	switch c.Op {
	case "in":
		for _, item := range c.List {
			if equal(v, item) {
				return true
			}
		}
		return false
	case "==":
		return equal(v, c.Value)
	case "!=":
		return !equal(v, c.Value)
	}
	a, ok1 := number(v)
	b, ok2 := number(c.Value)
	if !ok1 || !ok2 {
		return false
	}
	switch c.Op {
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	}
	return false
}

func equal(a, b any) bool {
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return x == y
		}
	}
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return format(a) == format(b)
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

// normalizeScalar makes YAML integers float64, as JSON numbers are.
func normalizeScalar(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
}
