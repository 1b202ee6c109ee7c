package workflow

import (
	"math"
	"slices"
	"testing"
)

// FuzzParseCondition: any text either fails to parse or gives a condition
// whose Match never panics and keeps the language's laws: == and != are
// complements, < and >= split the numbers (NaN aside), and a condition
// matches the values it names.
func FuzzParseCondition(f *testing.F) {
	for _, seed := range []struct {
		cond string
		num  float64
		text string
	}{
		{"< 100", 99.5, "large"},
		{">= 10", 10, "10"},
		{"== ready", 0, "ready"},
		{"!= 0", 1, ""},
		{"in [small, medium]", 2, "medium"},
		{"in [1, 2, 3]", 2, "2"},
		{"large", 0, "large"},
		{"== true", 1, "true"},
		{"<= -1e308", math.Inf(-1), " 5 "},
		{"== .nan", math.NaN(), "NaN"},
		{"in {a: 1}", 0, ""},
		{"== [1]", 1, "[1]"},
		{"<", 0, ""},
	} {
		f.Add(seed.cond, seed.num, seed.text)
	}
	f.Fuzz(func(t *testing.T, raw string, num float64, text string) {
		c, err := ParseCondition(raw)
		if err != nil {
			return
		}
		if !slices.Contains([]string{"<", "<=", ">", ">=", "==", "!=", "in"}, c.Op) || c.Raw != raw {
			t.Fatalf("ParseCondition(%q) = %+v", raw, c)
		}
		values := []any{num, text, nil, true, false, c.Value}
		for _, v := range values {
			got := c.Match(v)
			switch c.Op {
			case "==", "!=":
				other := complement(t, c)
				if other.Match(v) == got && !isNaN(v) && !isNaN(c.Value) {
					t.Fatalf("%q and its negation agree (%v) on %#v", raw, got, v)
				}
			case "<", ">=":
				a, ok1 := number(v)
				b, ok2 := number(c.Value)
				if !ok1 || !ok2 {
					if got {
						t.Fatalf("%q matches the non-number %#v", raw, v)
					}
					continue
				}
				other := complement(t, c)
				if !math.IsNaN(a) && !math.IsNaN(b) && other.Match(v) == got {
					t.Fatalf("%q and its complement agree (%v) on %#v", raw, got, v)
				}
			}
		}
		switch c.Op {
		case "==":
			if !isNaN(c.Value) && !c.Match(c.Value) {
				t.Fatalf("%q does not match its own value %#v", raw, c.Value)
			}
		case "in":
			for _, item := range c.List {
				if !isNaN(item) && !c.Match(item) {
					t.Fatalf("%q does not match its item %#v", raw, item)
				}
			}
		}
	})
}

// complement parses the comparison with the opposite operator (== and !=,
// < and >=) and the same operand.
func complement(t *testing.T, c *Condition) *Condition {
	t.Helper()
	op := map[string]string{"==": "!=", "!=": "==", "<": ">=", ">=": "<"}[c.Op]
	other, err := ParseCondition(op + " " + c.operand)
	if err != nil || other.Op != op {
		t.Fatalf("the complement of %q (%s %s): %+v, %v", c.Raw, op, c.operand, other, err)
	}
	return other
}

func isNaN(v any) bool {
	f, ok := number(v)
	return ok && math.IsNaN(f)
}
