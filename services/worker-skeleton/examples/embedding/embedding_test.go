package embedding_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/embedding"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/featurehash"
)

const text = "Lucius routes each step of a job to the platform service that owns it. " +
	"Workers acknowledge pickup, execute, write artifacts and report a result. " +
	"Duplicate directives never run the work twice."

func TestExecute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		payload    map[string]any
		chunkSize  int
		dimensions int
	}{
		{"defaults", nil, 200, 64},
		{"small chunks", map[string]any{"chunk_size": 40.0}, 40, 64},
		{"custom dimensions", map[string]any{"chunk_size": 80.0, "dimensions": 16.0}, 80, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := workertest.Directive(t, "EMBEDDING", []byte(text), tc.payload)
			out, task, err := workertest.Execute(t, embedding.Executor{}, d)
			if err != nil {
				t.Fatal(err)
			}
			arts := task.Artifacts()
			if len(arts) != 1 || !strings.HasSuffix(arts[0].GetUri(), filepath.Join("embedding", "1", "vectors.json")) {
				t.Fatalf("artifacts = %v", arts)
			}
			body := workertest.ReadArtifact(t, arts[0])
			doc, err := featurehash.ParseDocument(body)
			if err != nil {
				t.Fatal(err)
			}
			want := featurehash.Chunks(text, tc.chunkSize)
			if doc.Dimensions != tc.dimensions || doc.ChunkSize != tc.chunkSize || len(doc.Chunks) != len(want) {
				t.Fatalf("document: %d dimensions, chunk size %d, %d chunks; want %d, %d, %d",
					doc.Dimensions, doc.ChunkSize, len(doc.Chunks), tc.dimensions, tc.chunkSize, len(want))
			}
			for i, c := range doc.Chunks {
				if c.Index != i || c.Text != want[i] {
					t.Errorf("chunk %d = %d %q, want %q", i, c.Index, c.Text, want[i])
				}
			}
			if out.Output["chunks"] != len(want) || out.Output["dimensions"] != tc.dimensions || out.Output["sha256"] != arts[0].GetSha256() {
				t.Errorf("output = %v", out.Output)
			}
		})
	}
}

func TestExecuteIsByteIdenticalForTheSameInput(t *testing.T) {
	t.Parallel()
	var bodies [][]byte
	for range 2 {
		d := workertest.Directive(t, "EMBEDDING", []byte(text), map[string]any{"chunk_size": 50.0})
		_, task, err := workertest.Execute(t, embedding.Executor{}, d)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, workertest.ReadArtifact(t, task.Artifacts()[0]))
	}
	if !bytes.Equal(bodies[0], bodies[1]) {
		t.Error("two runs on the same input wrote different vectors.json")
	}
}

func TestExecuteRejectsBadInputPermanently(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		input   []byte
		payload map[string]any
		want    string
	}{
		{"not utf-8", []byte{0xff, 0x00}, nil, "not UTF-8"},
		{"chunk size zero", []byte(text), map[string]any{"chunk_size": 0.0}, "payload.chunk_size"},
		{"fractional chunk size", []byte(text), map[string]any{"chunk_size": 2.5}, "payload.chunk_size"},
		{"too many dimensions", []byte(text), map[string]any{"dimensions": 5000.0}, "payload.dimensions"},
		{"dimensions as text", []byte(text), map[string]any{"dimensions": "64"}, "payload.dimensions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := workertest.Directive(t, "EMBEDDING", tc.input, tc.payload)
			_, _, err := workertest.Execute(t, embedding.Executor{}, d)
			if !worker.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a permanent failure naming %s", err, tc.want)
			}
		})
	}
}
