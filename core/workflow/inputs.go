package workflow

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Rule constrains one workflow input (one field of a command's payload).
type Rule struct {
	// Type is string, integer, number, boolean, list or object.
	Type     string   `yaml:"type"`
	Required bool     `yaml:"required"`
	Min      *float64 `yaml:"min"`
	Max      *float64 `yaml:"max"`
	MinLen   int      `yaml:"min_len"`
	MaxLen   int      `yaml:"max_len"`
	Enum     []string `yaml:"enum"`
	// Items is the element type of a list (string, integer, number, boolean, object).
	Items    string `yaml:"items"`
	MinItems int    `yaml:"min_items"`
	MaxItems int    `yaml:"max_items"`
}

var knownTypes = map[string]bool{"string": true, "integer": true, "number": true, "boolean": true, "list": true, "object": true}

// check validates the rule itself; it returns a problem or "".
func (r Rule) check() string {
	switch {
	case !knownTypes[r.Type]:
		return fmt.Sprintf("unknown type %q (want string, integer, number, boolean, list or object)", r.Type)
	case r.Type == "list" && r.Items != "" && (!knownTypes[r.Items] || r.Items == "list"):
		return fmt.Sprintf("unknown items type %q", r.Items)
	case r.Min != nil && r.Max != nil && *r.Min > *r.Max:
		return "min is greater than max"
	case r.MinLen < 0 || r.MaxLen < 0 || (r.MaxLen > 0 && r.MinLen > r.MaxLen):
		return "min_len/max_len are inconsistent"
	case r.MinItems < 0 || r.MaxItems < 0 || (r.MaxItems > 0 && r.MinItems > r.MaxItems):
		return "min_items/max_items are inconsistent"
	}
	return ""
}

// Violation is one payload problem, named by its field path (e.g. payload.prompt_set[2]).
type Violation struct {
	Field       string
	Description string
}

// Bind checks a command's payload (as decoded from JSON: strings, float64
// numbers, bools, []any, map[string]any) against the workflow's inputs and
// returns the inputs a job runs with: the payload with defaults filled in.
// Payload fields no input declares are kept, so tasks can read them.
func (d *Definition) Bind(payload map[string]any) (map[string]any, []Violation) {
	inputs := make(map[string]any, len(payload)+len(d.Inputs))
	for k, v := range payload {
		inputs[k] = v
	}
	names := make([]string, 0, len(d.Inputs))
	for n := range d.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Violation
	for _, name := range names {
		in := d.Inputs[name]
		v, present := payload[name]
		field := "payload." + name
		if !present || v == nil {
			if in.Default != nil {
				inputs[name] = in.Default
			} else if in.Required {
				out = append(out, Violation{field, fmt.Sprintf("is required by workflow %s", d.ID)})
			}
			continue
		}
		out = append(out, in.validate(field, v)...)
	}
	return inputs, out
}

func (r Rule) validate(name string, value any) []Violation {
	bad := func(format string, args ...any) []Violation {
		return []Violation{{name, fmt.Sprintf(format, args...)}}
	}
	switch r.Type {
	case "string":
		s, ok := value.(string)
		if !ok {
			return bad("must be a string")
		}
		n := len([]rune(s))
		if r.Required && strings.TrimSpace(s) == "" {
			return bad("must not be blank")
		}
		if n < r.MinLen || (r.MaxLen > 0 && n > r.MaxLen) {
			return bad("length must be between %d and %s", r.MinLen, limit(r.MaxLen))
		}
		if len(r.Enum) > 0 && !contains(r.Enum, s) {
			return bad("must be one of %s", strings.Join(r.Enum, ", "))
		}
	case "integer", "number":
		f, ok := value.(float64)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			if r.Type == "integer" {
				return bad("must be an integer")
			}
			return bad("must be a number")
		}
		if r.Type == "integer" && f != math.Trunc(f) {
			return bad("must be an integer")
		}
		if (r.Min != nil && f < *r.Min) || (r.Max != nil && f > *r.Max) {
			return bad("must be between %s and %s", bound(r.Min), bound(r.Max))
		}
	case "boolean":
		if _, ok := value.(bool); !ok {
			return bad("must be true or false")
		}
	case "object":
		if _, ok := value.(map[string]any); !ok {
			return bad("must be an object")
		}
	case "list":
		items, ok := value.([]any)
		if !ok {
			return bad("must be a list")
		}
		if len(items) < r.MinItems || (r.MaxItems > 0 && len(items) > r.MaxItems) {
			return bad("must have between %d and %s items", r.MinItems, limit(r.MaxItems))
		}
		if r.Items != "" {
			elem := Rule{Type: r.Items, Required: r.Items == "string"}
			var out []Violation
			for i, item := range items {
				out = append(out, elem.validate(fmt.Sprintf("%s[%d]", name, i), item)...)
			}
			return out
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func limit(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func bound(f *float64) string {
	if f == nil {
		return "unbounded"
	}
	return fmt.Sprint(*f)
}
