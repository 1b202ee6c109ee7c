package runbook

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// stepParams parses a runbook whose one step has the given params (a YAML
// flow mapping) over the columns email and site.
func stepParams(t *testing.T, params string) *Params {
	t.Helper()
	y := "name: r\nversion: 1\ndata_source: {columns: [email, site]}\nphases:\n  - name: p\n    offset_minutes: 0\n    steps:\n" +
		"      - name: s\n        worker_id: w\n        function: f\n        params: " + params + "\n"
	rb, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return rb.Phases[0].Steps[0].Params
}

func TestParamsRender(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"email": "ann@contoso.com", "site": "", VarMemberKey: "ann", VarBatchID: "42",
		VarBatchStartTime: "2025-03-15T00:00:00Z", VarBatchTime: "2025-03-15T00:00:00Z"}
	tests := []struct {
		name, params string
		want         map[string]any
	}{
		{"whole reference", `{to: "{{ email }}"}`, map[string]any{"to": "ann@contoso.com"}},
		{"spaces optional", `{to: "{{email}}"}`, map[string]any{"to": "ann@contoso.com"}},
		{"interpolation", `{subject: "Batch {{ _batch_id }} for {{ _member_key }} at {{ _batch_start_time }}"}`,
			map[string]any{"subject": "Batch 42 for ann at 2025-03-15T00:00:00Z"}},
		{"empty value", `{site: "[{{ site }}]"}`, map[string]any{"site": "[]"}},
		{"plain text", `{subject: removed}`, map[string]any{"subject": "removed"}},
		{"literals stay typed", `{n: 3, big: 9007199254740993, f: 2.5, yes: true, none: null, hex: 0x1F}`,
			map[string]any{"n": int64(3), "big": int64(9007199254740993), "f": 2.5, "yes": true, "none": nil, "hex": int64(31)}},
		{"quoted number is text", `{n: "3"}`, map[string]any{"n": "3"}},
		{"a date is text", `{day: 2025-03-15}`, map[string]any{"day": "2025-03-15"}},
		{"nested maps and lists", `{mail: {to: ["{{ email }}", "ops@contoso.com"], meta: {batch: "{{ _batch_id }}", tries: [1, 2]}}}`,
			map[string]any{"mail": map[string]any{"to": []any{"ann@contoso.com", "ops@contoso.com"},
				"meta": map[string]any{"batch": "42", "tries": []any{int64(1), int64(2)}}}}},
		{"empty list and map", `{a: [], b: {}}`, map[string]any{"a": []any{}, "b": map[string]any{}}},
		{"numeric keys are text", `{1: one}`, map[string]any{"1": "one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := stepParams(t, tt.params).Render(vars)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Render = %#v\nwant %#v", got, tt.want)
			}
			if _, err := json.Marshal(got); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
		})
	}
}

func TestParamsRenderNamesEveryMissingVariable(t *testing.T) {
	t.Parallel()
	p := stepParams(t, `{to: "{{ email }}", cc: [{site: "{{ site }}"}], s: "{{ _batch_id }}"}`)
	_, err := p.Render(map[string]string{"email": "x"})
	if err == nil {
		t.Fatal("rendered without site and _batch_id")
	}
	for _, want := range []string{"params.cc[0].site: no value for {{ site }}", "params.s: no value for {{ _batch_id }}"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := p.Vars(); !reflect.DeepEqual(got, []string{"_batch_id", "email", "site"}) {
		t.Errorf("Vars = %v", got)
	}
}

func TestTemplateSyntaxErrors(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"{{ email":          "'{{' is not closed",
		"email }}":          "'}}' without '{{'",
		"}} {{ email }}":    "'}}' without '{{'",
		"{{ email }} }}":    "'}}' without '{{'",
		"{{ }}":             "names no variable",
		"{{ a.b }}":         "{{ a.b }}: want a variable name",
		"{{ email | up }}":  "want a variable name",
		"{{ {{ email }} }}": "want a variable name",
		"{{ 1x }}":          "want a variable name",
	} {
		if _, err := parseText(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseText(%q) error %v, want %q", in, err, want)
		}
	}
}

func TestVarsRenderTimesInUTC(t *testing.T) {
	t.Parallel()
	cet := time.FixedZone("CET", 3600)
	start := time.Date(2025, 3, 15, 1, 0, 0, 0, cet)
	m := Member{Key: "k1", BatchTime: time.Date(2025, 3, 15, 0, 0, 0, 500_000_000, time.UTC),
		Values: map[string]string{"email": "a@b", VarMemberKey: "spoofed"}}
	got := MemberVars(m, 7, start)
	want := map[string]string{"email": "a@b", VarMemberKey: "k1", VarBatchTime: "2025-03-15T00:00:00.5Z",
		VarBatchID: "7", VarBatchStartTime: "2025-03-15T00:00:00Z"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MemberVars = %v\nwant %v", got, want)
	}
	if got := BatchVars(7, start); !reflect.DeepEqual(got, map[string]string{VarBatchID: "7", VarBatchStartTime: "2025-03-15T00:00:00Z"}) {
		t.Fatalf("BatchVars = %v", got)
	}
}

// FuzzTemplate: parseText never panics, and what it accepts splits into
// parts that join back to a string with the same references.
func FuzzTemplate(f *testing.F) {
	f.Add("Your move on {{ _batch_start_time }} to {{email}}")
	f.Add("{{ a }}{{ b }}")
	f.Add("}}{{")
	f.Fuzz(func(t *testing.T, s string) {
		parts, err := parseText(s)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, pt := range parts {
			if pt.ref != "" {
				if !varPattern.MatchString(pt.ref) {
					t.Fatalf("reference %q accepted", pt.ref)
				}
				b.WriteString("{{" + pt.ref + "}}")
				continue
			}
			if strings.Contains(pt.text, "{{") || strings.Contains(pt.text, "}}") {
				t.Fatalf("text part %q holds braces", pt.text)
			}
			b.WriteString(pt.text)
		}
		again, err := parseText(b.String())
		if err != nil || !reflect.DeepEqual(again, parts) {
			t.Fatalf("%q → %q does not parse the same: %v", s, b.String(), err)
		}
	})
}
