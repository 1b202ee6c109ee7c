package workflow

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"go.yaml.in/yaml/v3"
)

// Condition decides whether a conditional's branch is taken. It is a CEL
// expression (https://cel.dev) over value (the node's condition_field) and
// inputs (the workflow's inputs), type-checked to bool when the workflow is
// parsed: written as `when:`, or translated from the comparison language a
// `condition:` holds ("< 100", "<= 5", "> 1.5", ">= 10", "== ready", "!= 0",
// "in [small, medium]", or a bare value meaning equality). In that language
// numbers compare numerically (numeric strings count as numbers), ordering
// comparisons never match non-numbers, and equality otherwise compares the
// values' text: the functions lucius.numeric, lucius.number and lucius.same,
// available to `when:` too, say so in CEL.
type Condition struct {
	// Raw is the condition as written.
	Raw string
	// Expr is the CEL expression that decides.
	Expr string
	// Op, Value and List describe a `condition:` comparison (Op is <, <=, >,
	// >=, ==, != or in); Op is empty for a `when:` expression.
	Op    string
	Value any
	List  []any
	// operand is the comparison's text after its operator.
	operand string
	program cel.Program
}

// conditionEnv declares what a condition may name.
var conditionEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("value", cel.DynType),
		cel.Variable("inputs", cel.MapType(cel.StringType, cel.DynType)),
		cel.Function("lucius.same", cel.Overload("lucius_same_dyn_dyn", []*cel.Type{cel.DynType, cel.DynType}, cel.BoolType,
			cel.BinaryBinding(func(a, b ref.Val) ref.Val { return types.Bool(equal(native(a), native(b))) }))),
		cel.Function("lucius.numeric", cel.Overload("lucius_numeric_dyn", []*cel.Type{cel.DynType}, cel.BoolType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { _, ok := number(native(v)); return types.Bool(ok) }))),
		cel.Function("lucius.number", cel.Overload("lucius_number_dyn", []*cel.Type{cel.DynType}, cel.DoubleType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				f, ok := number(native(v))
				if !ok {
					return types.Double(math.NaN())
				}
				return types.Double(f)
			}))),
	)
	if err != nil {
		panic("workflow: condition environment: " + err.Error())
	}
	return env
}()

// ParseWhen compiles a `when:` CEL expression; it must be a bool.
func ParseWhen(expr string) (*Condition, error) {
	c := &Condition{Raw: expr, Expr: expr}
	if err := c.compile(); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseCondition reads a `condition:` comparison and translates it to CEL.
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
	c.operand = s
	switch {
	case c.Op == "" && (strings.HasPrefix(s, "in ") || strings.HasPrefix(s, "in[")):
		c.Op = "in"
		var list []any
		if err := yaml.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(s, "in"))), &list); err != nil || list == nil {
			return nil, fmt.Errorf("condition %q: want in [a, b, …]", raw)
		}
		items := make([]string, len(list))
		for i, v := range list {
			list[i] = normalizeScalar(v)
			items[i] = literal(list[i])
		}
		c.List = list
		c.Expr = "[" + strings.Join(items, ", ") + "].exists(x, lucius.same(value, x))"
	default:
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
		switch c.Op {
		case "==":
			c.Expr = "lucius.same(value, " + literal(c.Value) + ")"
		case "!=":
			c.Expr = "!lucius.same(value, " + literal(c.Value) + ")"
		default:
			if _, numeric := number(c.Value); !numeric {
				return nil, fmt.Errorf("condition %q: %s needs a number", raw, c.Op)
			}
			c.Expr = "lucius.numeric(value) && lucius.number(value) " + c.Op + " lucius.number(" + literal(c.Value) + ")"
		}
	}
	if err := c.compile(); err != nil {
		return nil, fmt.Errorf("condition %q: %w", raw, err)
	}
	return c, nil
}

// compile type-checks Expr and prepares its program.
func (c *Condition) compile() error {
	ast, iss := conditionEnv.Compile(c.Expr)
	if iss.Err() != nil {
		// One line, positions as when:LINE:COLUMN within the expression.
		msg := strings.ReplaceAll(iss.Err().Error(), "<input>:", "when:")
		return fmt.Errorf("%s", strings.Join(strings.Fields(msg), " "))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return fmt.Errorf("%q is a %s, want a bool", c.Expr, ast.OutputType())
	}
	prg, err := conditionEnv.Program(ast)
	if err != nil {
		return err
	}
	c.program = prg
	return nil
}

// Match reports whether v satisfies the condition, with no inputs.
func (c *Condition) Match(v any) bool { return c.MatchIn(v, nil) }

// MatchIn reports whether the condition holds for value v and the workflow's
// inputs. An expression that fails at run time (a missing input, a type it
// cannot compare) does not match.
func (c *Condition) MatchIn(v any, inputs map[string]any) bool {
	if inputs == nil {
		inputs = map[string]any{}
	}
	out, _, err := c.program.Eval(map[string]any{"value": v, "inputs": inputs})
	if err != nil {
		return false
	}
	b, ok := out.Value().(bool)
	return ok && b
}

// literal writes a comparison's value as a CEL literal: numbers as doubles
// (spelled as text, so NaN and infinities survive), everything that is not
// a string, number, bool or null as its text.
func literal(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return "double(" + strconv.Quote(strconv.FormatFloat(x, 'g', -1, 64)) + ")"
	case string:
		return strconv.Quote(x)
	}
	return strconv.Quote(format(v))
}

// native is a CEL value as the comparison language sees it.
func native(v ref.Val) any {
	switch x := v.(type) {
	case types.Null:
		return nil
	case types.Int:
		return float64(x)
	case types.Uint:
		return float64(x)
	}
	return v.Value()
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
