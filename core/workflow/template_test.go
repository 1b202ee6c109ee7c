package workflow

import (
	"reflect"
	"strings"
	"testing"
)

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	scope := Scope{
		Inputs: map[string]any{"name": "tile", "n": 3.0, "list": []any{"a", "b"}},
		Output: func(id string) (any, bool) {
			if id == "validate" {
				return map[string]any{"size": 42.5, "meta": map[string]any{"crs": "EPSG:4326"}, "bands": []any{1.0, 2.0}}, true
			}
			return nil, false
		},
		Item:  map[string]any{"x": 7.0},
		Index: 4,
	}
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"typed whole reference keeps a list", "{{ inputs.list }}", []any{"a", "b"}},
		{"typed number", "{{ inputs.n }}", 3.0},
		{"nested output path", "{{ nodes.validate.output.meta.crs }}", "EPSG:4326"},
		{"index into a list", "{{ nodes.validate.output.bands[1] }}", 2.0},
		{"interpolation", "{{ inputs.name }}-{{ index }}.json", "tile-4.json"},
		{"interpolated float", "size={{ nodes.validate.output.size }}", "size=42.5"},
		{"item field", "{{ item.x }}", 7.0},
		{"missing whole is null", "{{ nodes.other.output.x }}", nil},
		{"missing in text is empty", "[{{ inputs.nope }}]", "[]"},
		{"plain text", "no templates", "no templates"},
		{"literal number", 12, 12.0},
		{"map of templates", map[string]any{"a": "{{ inputs.n }}", "b": "{{ inputs.nope }}"}, map[string]any{"a": 3.0}},
		{"list of templates", []any{"{{ index }}", true}, []any{4.0, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := ParseTemplate(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := tpl.Render(scope); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Render = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestTemplateSyntaxErrors(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"{{ inputs.x":             "not closed",
		"x }}":                    "without '{{'",
		"{{ }}":                   "empty expression",
		"{{ config.x }}":          "unknown name \"config\"",
		"{{ nodes.a.result }}":    "want nodes.<id>.output",
		"{{ inputs }}":            "want inputs.<name>",
		"{{ inputs.a..b }}":       "bad path",
		"{{ index.x }}":           "index has no fields",
		"{{ nodes.a.output[x] }}": "bad path",
	} {
		if _, err := ParseTemplate(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTemplate(%q) error %v, want %q", in, err, want)
		}
	}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cond  string
		value any
		want  bool
	}{
		{"< 100", 99.5, true},
		{"< 100", 100.0, false},
		{"<= 100", 100.0, true},
		{"> 1.5", 2.0, true},
		{">= 10", "10", true}, // numeric strings compare as numbers
		{"< 100", "large", false},
		{"< 100", nil, false},
		{"== ready", "ready", true},
		{"== 3", 3.0, true},
		{"!= 0", 1.0, true},
		{"!= ready", "ready", false},
		{"in [small, medium]", "medium", true},
		{"in [1, 2, 3]", 2.0, true},
		{"in [1, 2, 3]", 4.0, false},
		{"large", "large", true},
		{"== true", true, true},
	}
	for _, tt := range tests {
		c, err := ParseCondition(tt.cond)
		if err != nil {
			t.Fatalf("%q: %v", tt.cond, err)
		}
		if got := c.Match(tt.value); got != tt.want {
			t.Errorf("%q matches %#v = %v, want %v", tt.cond, tt.value, got, tt.want)
		}
	}
	for _, bad := range []string{"<", "> big", "in nope", "== [1]"} {
		if _, err := ParseCondition(bad); err == nil {
			t.Errorf("ParseCondition(%q) accepted", bad)
		}
	}
}

func TestBindFillsDefaultsAndReportsViolations(t *testing.T) {
	t.Parallel()
	defs, err := LoadDir(BuiltinFiles(), NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	var raster, sis *Definition
	for _, d := range defs {
		switch d.ID {
		case "raster_processing":
			raster = d
		case "OCR_EMBEDDING_SIS":
			sis = d
		}
	}
	in, vs := raster.Bind(map[string]any{"container_name": "bronze", "blob_name": "a.tif", "extra": 1.0})
	if len(vs) != 0 || in["target_crs"] != "EPSG:3857" || in["extra"] != 1.0 {
		t.Fatalf("inputs %v violations %v", in, vs)
	}
	_, vs = raster.Bind(map[string]any{"container_name": "bronze"})
	if len(vs) != 1 || vs[0].Field != "payload.blob_name" {
		t.Fatalf("violations %v", vs)
	}
	_, vs = sis.Bind(map[string]any{"prompt_set": []any{"ok", 3.0}, "chunk_size": 2.5})
	fields := map[string]bool{}
	for _, v := range vs {
		fields[v.Field] = true
	}
	if !fields["payload.prompt_set[1]"] || !fields["payload.chunk_size"] {
		t.Fatalf("violations %v", vs)
	}
}

// FuzzTemplate: parsing never panics, and what parses renders without panicking.
func FuzzTemplate(f *testing.F) {
	f.Add("{{ inputs.a.b[2] }}-{{ index }}")
	f.Add("{{ nodes.x.output }}")
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseTemplate(s)
		if err != nil {
			return
		}
		tpl.Render(Scope{Inputs: map[string]any{"a": map[string]any{"b": []any{1.0, 2.0, 3.0}}}, Item: s})
		for _, r := range tpl.Refs() {
			if r.Root == "" {
				t.Fatalf("reference without root in %q", s)
			}
		}
	})
}
