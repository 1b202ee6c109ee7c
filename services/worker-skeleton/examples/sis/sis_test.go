package sis_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/featurehash"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/sis"
)

const text = "The invoice total is 420 euros, due on the first of March. " +
	"Shipping goes to the warehouse in Rotterdam by truck. " +
	"The contract renews every year unless cancelled in writing."

func vectors(t *testing.T, chunkSize, dims int) []byte {
	t.Helper()
	b, err := featurehash.Embed(text, chunkSize, dims).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExecute(t *testing.T) {
	t.Parallel()
	prompts := []any{"invoice total in euros", "shipping to the warehouse in Rotterdam by truck", "contract renews unless cancelled in writing"}
	for _, tc := range []struct {
		name       string
		input      func(t *testing.T) []byte
		payload    map[string]any
		wantSource string
		wantDims   int
	}{
		{"vectors", func(t *testing.T) []byte { return vectors(t, 60, 128) }, map[string]any{"prompt_set": prompts}, "vectors", 128},
		{"plain text", func(*testing.T) []byte { return []byte(text) }, map[string]any{"prompt_set": prompts, "chunk_size": 60.0}, "text", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := workertest.Directive(t, "SIS", tc.input(t), tc.payload)
			out, task, err := workertest.Execute(t, sis.Executor{}, d)
			if err != nil {
				t.Fatal(err)
			}
			arts := task.Artifacts()
			if len(arts) != 1 || !strings.HasSuffix(arts[0].GetUri(), filepath.Join("sis", "1", "result.json")) {
				t.Fatalf("artifacts = %v", arts)
			}
			var res sis.Result
			if err := json.Unmarshal(workertest.ReadArtifact(t, arts[0]), &res); err != nil {
				t.Fatal(err)
			}
			if res.Source != tc.wantSource || res.Dimensions != tc.wantDims || len(res.Matches) != 3 {
				t.Fatalf("result: source %s, %d dimensions, %d matches", res.Source, res.Dimensions, len(res.Matches))
			}
			chunks := featurehash.Chunks(text, 60)
			for i, wantWord := range []string{"invoice", "Shipping", "contract"} {
				m := res.Matches[i]
				if m.Prompt != prompts[i] || !strings.Contains(chunks[m.ChunkIndex], wantWord) || m.Score <= 0 ||
					!strings.HasPrefix(chunks[m.ChunkIndex], m.Excerpt) {
					t.Errorf("match %d = %+v, want the chunk about %q", i, m, wantWord)
				}
			}
			if out.Output["prompts"] != 3 || out.Output["source"] != tc.wantSource || out.Output["sha256"] != arts[0].GetSha256() {
				t.Errorf("output = %v", out.Output)
			}
		})
	}
}

func TestSearchTiesGoToTheFirstChunkAndExcerptsAreBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("alpha ", 100)
	doc := featurehash.Embed(long+"\n"+long, 600, 32)
	matches := sis.Search(doc, []string{"alpha", "unrelated words"})
	if matches[0].ChunkIndex != 0 || matches[1].ChunkIndex != 0 || matches[1].Score != 0 {
		t.Errorf("matches = %+v", matches)
	}
	if n := len([]rune(matches[0].Excerpt)); n != sis.ExcerptLength+1 || !strings.HasSuffix(matches[0].Excerpt, "…") {
		t.Errorf("excerpt of %d characters: %q", n, matches[0].Excerpt)
	}
}

func TestExecuteRejectsPermanently(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		input   []byte
		payload map[string]any
		want    string
	}{
		{"missing prompt set", []byte(text), nil, "prompt_set is missing or empty"},
		{"empty prompt set", []byte(text), map[string]any{"prompt_set": []any{}}, "prompt_set is missing or empty"},
		{"prompt set not a list", []byte(text), map[string]any{"prompt_set": "what"}, "payload.prompt_set"},
		{"prompt not a string", []byte(text), map[string]any{"prompt_set": []any{"ok", 3.0}}, "payload.prompt_set[1]"},
		{"no text", []byte("  \n "), map[string]any{"prompt_set": []any{"x"}}, "no text to search"},
		{"binary input", []byte{0xff, 0xfe, 0x00}, map[string]any{"prompt_set": []any{"x"}}, "neither a vectors.json nor UTF-8"},
		{"corrupt vectors", []byte(`{"model":"` + featurehash.Model + `","dimensions":8,"chunks":[{"index":0,"text":"a","vector":[1]}]}`),
			map[string]any{"prompt_set": []any{"x"}}, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := workertest.Directive(t, "SIS", tc.input, tc.payload)
			_, task, err := workertest.Execute(t, sis.Executor{}, d)
			if !worker.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a permanent failure naming %q", err, tc.want)
			}
			if len(task.Artifacts()) != 0 {
				t.Error("an artifact was written for rejected input")
			}
		})
	}
}
