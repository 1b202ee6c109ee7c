package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
)

func TestBuiltinProtocolsCoverTheSixRequestTypes(t *testing.T) {
	t.Parallel()
	r := Builtin()
	want := map[string]string{
		"OCR":               "OCR",
		"EMBEDDING":         "EMBEDDING",
		"SIS":               "SIS",
		"OCR_EMBEDDING":     "OCR → EMBEDDING",
		"OCR_EMBEDDING_SIS": "OCR → EMBEDDING → SIS",
		"EMBEDDING_SIS":     "EMBEDDING → SIS",
	}
	if got := r.IDs(); len(got) != len(want) {
		t.Fatalf("IDs() = %v, want %d protocols", got, len(want))
	}
	for id, steps := range want {
		p, ok := r.Lookup(id)
		if !ok {
			t.Fatalf("protocol %s missing", id)
		}
		if p.String() != steps {
			t.Errorf("%s steps = %s, want %s", id, p, steps)
		}
		for _, s := range p.Steps {
			if s.MaxAttempts != DefaultMaxAttempts || s.AckTimeout() != DefaultAckTimeout {
				t.Errorf("%s/%s defaults not applied: %+v", id, s.ID, s)
			}
		}
	}
	if got := strings.Join(r.Services(), ","); got != "embedding,ocr,sis" {
		t.Errorf("Services() = %s", got)
	}
}

func TestParseReportsLineAndColumn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"bad step type", "protocol_id: X\nversion: 1\nsteps:\n  - id: a\n    type: lower\n    service: s\n", "x.yaml:5:5: step type \"lower\""},
		{"duplicate step id", "protocol_id: X\nversion: 1\nsteps:\n  - {id: a, type: A, service: s}\n  - {id: a, type: B, service: s}\n", "step id \"a\" is used twice"},
		{"no steps", "protocol_id: X\nversion: 1\nsteps: []\n", "x.yaml:3:8: a protocol needs at least one step"},
		{"unknown key", "protocol_id: X\nversion: 1\nstepz: []\n", "field stepz not found"},
		{"bad rule type", "protocol_id: X\nversion: 1\nsteps:\n  - id: a\n    type: A\n    service: s\n    payload:\n      f: {type: decimal}\n", "x.yaml:8:10: payload field \"f\": unknown type \"decimal\""},
		{"min above max", "protocol_id: X\nversion: 1\nsteps:\n  - id: a\n    type: A\n    service: s\n    payload:\n      f: {type: integer, min: 5, max: 1}\n", "min is greater than max"},
		{"bad protocol id", "protocol_id: x-y\nversion: 1\nsteps:\n  - {id: a, type: A, service: s}\n", "x.yaml:1:1: protocol_id \"x-y\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("x.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadRejectsDuplicateProtocols(t *testing.T) {
	t.Parallel()
	body := []byte("protocol_id: X\nversion: 1\nsteps:\n  - {id: a, type: A, service: s}\n")
	_, err := Load(fstest.MapFS{"a.yaml": {Data: body}, "b.yaml": {Data: body}})
	if err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("error %v, want a duplicate error", err)
	}
}

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	sis, _ := Builtin().Lookup("OCR_EMBEDDING_SIS")
	tests := []struct {
		name    string
		payload string
		want    []string // "field: description fragment"
	}{
		{"valid", `{"prompt_set":["summarize"],"chunk_size":200}`, nil},
		{"unknown fields pass through", `{"prompt_set":["a"],"extra":{"x":1}}`, nil},
		{"missing prompt_set", `{}`, []string{"payload.prompt_set: is required by the SIS step"}},
		{"null prompt_set", `{"prompt_set":null}`, []string{"payload.prompt_set: is required"}},
		{"empty prompt_set", `{"prompt_set":[]}`, []string{"payload.prompt_set: must have between 1 and 100 items"}},
		{"prompt_set not a list", `{"prompt_set":"summarize"}`, []string{"payload.prompt_set: must be a list"}},
		{"blank prompt", `{"prompt_set":["ok"," "]}`, []string{"payload.prompt_set[1]: must not be blank"}},
		{"non-string prompt", `{"prompt_set":[3]}`, []string{"payload.prompt_set[0]: must be a string"}},
		{"chunk_size fractional", `{"prompt_set":["a"],"chunk_size":2.5}`, []string{"payload.chunk_size: must be an integer"}},
		{"chunk_size out of range", `{"prompt_set":["a"],"chunk_size":0}`, []string{"payload.chunk_size: must be between 1 and 1e+06"}},
		{"chunk_size wrong type", `{"prompt_set":["a"],"chunk_size":"big"}`, []string{"payload.chunk_size: must be an integer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var payload map[string]any
			if err := json.Unmarshal([]byte(tt.payload), &payload); err != nil {
				t.Fatal(err)
			}
			got := sis.ValidatePayload(payload)
			if len(got) != len(tt.want) {
				t.Fatalf("violations %v, want %v", got, tt.want)
			}
			for i, w := range tt.want {
				field, desc, _ := strings.Cut(w, ": ")
				if got[i].Field != field || !strings.Contains(got[i].Description, desc) {
					t.Errorf("violation %d = %+v, want %s", i, got[i], w)
				}
			}
		})
	}
}

// FuzzParse: no input makes Parse panic, and whatever it accepts is usable.
func FuzzParse(f *testing.F) {
	f.Add([]byte("protocol_id: X\nversion: 1\nsteps:\n  - {id: a, type: A, service: s, payload: {f: {type: list, items: string}}}\n"))
	f.Add([]byte("steps: [{}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if len(p.Steps) == 0 || p.Steps[0].MaxAttempts == 0 {
			t.Fatalf("accepted protocol without usable steps: %+v", p)
		}
	})
}

// FuzzValidatePayload: any JSON payload is judged without panicking, and every
// violation names a payload field.
func FuzzValidatePayload(f *testing.F) {
	f.Add(`{"prompt_set":["a"],"chunk_size":12}`)
	f.Add(`{"prompt_set":[null, {}, 1e400]}`)
	p, _ := Builtin().Lookup("OCR_EMBEDDING_SIS")
	f.Fuzz(func(t *testing.T, raw string) {
		var payload map[string]any
		if json.Unmarshal([]byte(raw), &payload) != nil {
			return
		}
		for _, v := range p.ValidatePayload(payload) {
			if !strings.HasPrefix(v.Field, "payload.") || v.Description == "" {
				t.Fatalf("bad violation %+v", v)
			}
		}
	})
}
