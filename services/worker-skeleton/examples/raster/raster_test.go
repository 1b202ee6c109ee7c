package raster_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/raster"
)

// directive is a raster directive of handler over input; input_ref and
// job_input_ref name the input file.
func directive(t *testing.T, handler string, input []byte, payload map[string]any) *luciusv1.Directive {
	t.Helper()
	d := workertest.Directive(t, handler, input, payload)
	d.Service = "raster"
	return d
}

// sparseFile creates a file of size bytes whose last bytes are tail, the rest
// a hole (os.Truncate), so a large input costs no disk space.
func sparseFile(t *testing.T, size int64, tail []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sparse.tif")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	if len(tail) > 0 {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(tail, size-int64(len(tail))); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return p
}

// jsonOutput checks that an output is what the runner can send (structpb)
// and returns it as the orchestrator sees it (JSON numbers are float64).
func jsonOutput(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	s, err := structpb.NewStruct(out)
	if err != nil {
		t.Fatalf("output is not JSON-like: %v", err)
	}
	return s.AsMap()
}

func wantPermanent(t *testing.T, err error, code, contains string) {
	t.Helper()
	_, reason := worker.Classify(err)
	if !worker.IsPermanent(err) || !strings.HasPrefix(reason, code+": ") || !strings.Contains(reason, contains) {
		t.Fatalf("err = %v (reason %q), want a permanent %s failure mentioning %q", err, reason, code, contains)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	names := map[string]any{"container_name": "rasters", "blob_name": "scene.tif"}
	for _, tc := range []struct {
		name     string
		input    []byte
		sparse   int64 // when > 0, input_ref names a sparse file of this size instead
		payload  map[string]any
		wantSize int64
		wantErr  string // "CODE: substring"
	}{
		{"small file", bytes.Repeat([]byte{0x49}, 3*1024*1024+512), 0, names, 3*1024*1024 + 512, ""},
		{"one byte", []byte{1}, 0, names, 1, ""},
		{"150 MiB sparse file", nil, 150 << 20, names, 150 << 20, ""},
		{"empty input", nil, 0, names, 0, "INVALID_INPUT: raster_validate: input"},
		{"missing container_name", []byte{1}, 0, map[string]any{"blob_name": "scene.tif"}, 0,
			"INVALID_INPUT: raster_validate: payload.container_name is required"},
		{"empty blob_name", []byte{1}, 0, map[string]any{"container_name": "rasters", "blob_name": ""}, 0,
			"INVALID_INPUT: raster_validate: payload.blob_name is required"},
		{"no payload", []byte{1}, 0, nil, 0, "INVALID_INPUT: raster_validate: payload.container_name is required"},
		{"blob_name not a string", []byte{1}, 0, map[string]any{"container_name": "rasters", "blob_name": 7.0}, 0,
			"INVALID_INPUT: raster_validate: payload.blob_name: want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := directive(t, raster.HandlerValidate, tc.input, tc.payload)
			if tc.sparse > 0 {
				d.InputRef = "file://" + sparseFile(t, tc.sparse, []byte("end"))
			}
			started := time.Now()
			out, task, err := workertest.Execute(t, raster.NewExecutor(), d)
			if elapsed := time.Since(started); elapsed > 2*time.Second {
				t.Errorf("validation took %v; it must only stat the input", elapsed)
			}
			if tc.wantErr != "" {
				code, msg, _ := strings.Cut(tc.wantErr, ": ")
				wantPermanent(t, err, code, msg)
				if len(task.Artifacts()) != 0 {
					t.Errorf("artifacts written for a rejected step: %v", task.Artifacts())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := jsonOutput(t, out.Output)
			want := map[string]any{
				"file_size_mb": float64(tc.wantSize) / (1 << 20), "bytes": float64(tc.wantSize), "blob_url": d.GetInputRef(),
				"container_name": "rasters", "blob_name": tc.payload["blob_name"],
			}
			if !equalJSON(got, want) {
				t.Errorf("output = %v, want %v", got, want)
			}
			arts := task.Artifacts()
			if len(arts) != 1 || arts[0].GetName() != raster.ValidationArtifact ||
				!strings.HasSuffix(arts[0].GetUri(), "/raster_validate/1/validation.json") {
				t.Fatalf("artifacts = %v", arts)
			}
			var file map[string]any
			if err := json.Unmarshal(workertest.ReadArtifact(t, arts[0]), &file); err != nil || !equalJSON(file, want) {
				t.Errorf("validation.json = %v (%v), want %v", file, err, want)
			}
			if tc.sparse > 0 && got["file_size_mb"].(float64) < 100 {
				t.Errorf("file_size_mb = %v for a %d-byte file; the workflow would take the light path", got["file_size_mb"], tc.sparse)
			}
		})
	}
}

func TestValidateMissingInputIsPermanent(t *testing.T) {
	t.Parallel()
	d := directive(t, raster.HandlerValidate, nil, map[string]any{"container_name": "c", "blob_name": "b"})
	d.InputRef += ".missing"
	_, _, err := workertest.Execute(t, raster.NewExecutor(), d)
	wantPermanent(t, err, worker.CodeInputNotFound, "raster_validate: read file://")
}

func TestConvert(t *testing.T) {
	t.Parallel()
	random := make([]byte, 1<<20+37) // more than one copy buffer, odd size
	rand.Read(random)
	tail := []byte("last bytes after a hole")
	sparse := sparseFile(t, 24<<20, tail)
	missing := filepath.Join(t.TempDir(), "missing.tif") // inside the file roots workertest gives
	sparseContent := make([]byte, 24<<20)
	copy(sparseContent[len(sparseContent)-len(tail):], tail)

	for _, tc := range []struct {
		name     string
		handler  string
		pipeline string
		source   []byte // the content; written to a file source_url names
		ref      string // when set, source_url is this instead
		payload  map[string]any
		wantErr  string
	}{
		{"fa", raster.HandlerCOGFA, raster.PipelineFA, random, "", nil, ""},
		{"docker", raster.HandlerCOGDocker, raster.PipelineDocker, random, "", nil, ""},
		{"docker, large sparse source", raster.HandlerCOGDocker, raster.PipelineDocker, sparseContent, "file://" + sparse, nil, ""},
		{"fa, empty source", raster.HandlerCOGFA, raster.PipelineFA, []byte{}, "", nil, ""},
		{"missing source_url", raster.HandlerCOGFA, "", nil, "", map[string]any{"target_crs": "EPSG:3857"},
			"INVALID_INPUT: raster_cog_fa: payload.source_url is required"},
		{"missing target_crs", raster.HandlerCOGDocker, "", random, "", map[string]any{"source_url": "file:///x.tif"},
			"INVALID_INPUT: raster_cog_docker: payload.target_crs is required"},
		{"source not found", raster.HandlerCOGFA, "", nil, "file://" + missing, nil,
			"INPUT_NOT_FOUND: raster_cog_fa: source_url: read file://" + missing},
		{"source outside the file roots", raster.HandlerCOGFA, "", nil, "file:///etc/passwd", nil,
			"REF_OUTSIDE_FILE_ROOTS: raster_cog_fa: source_url: ref"},
		{"source on blob storage", raster.HandlerCOGDocker, "", nil, "https://acct.blob.core.windows.net/c/b.tif", nil,
			"UNSUPPORTED_REF: raster_cog_docker: source_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			source := tc.ref
			if source == "" && tc.source != nil {
				source = filepath.Join(t.TempDir(), "in.tif")
				if err := os.WriteFile(source, tc.source, 0o644); err != nil {
					t.Fatal(err)
				}
				source = "file://" + source
			}
			payload := tc.payload
			if payload == nil {
				payload = map[string]any{"source_url": source, "target_crs": "EPSG:3857"}
			}
			d := directive(t, tc.handler, nil, payload)
			out, task, err := workertest.Execute(t, raster.NewExecutor(), d)
			if tc.wantErr != "" {
				code, msg, _ := strings.Cut(tc.wantErr, ": ")
				wantPermanent(t, err, code, msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(tc.source)
			stepDir := task.StepDir()
			want := map[string]any{
				"source_url": source, "target_crs": "EPSG:3857", "path": filepath.Join(stepDir, "cog.tif"),
				"bytes": float64(len(tc.source)), "sha256": hex.EncodeToString(sum[:]), "pipeline": tc.pipeline,
			}
			if got := jsonOutput(t, out.Output); !equalJSON(got, want) {
				t.Errorf("output = %v, want %v", got, want)
			}
			if !strings.HasSuffix(stepDir, filepath.Join(tc.handler, "1")) {
				t.Errorf("step dir %s, want <workspace>/%s/1", stepDir, tc.handler)
			}
			// The manifest is the primary artifact: it reaches output_ref.
			if len(out.Artifacts) != 2 || out.Artifacts[0].GetName() != raster.ManifestArtifact ||
				out.Artifacts[1].GetName() != raster.COGArtifact || out.Artifacts[1].GetSha256() != want["sha256"] {
				t.Fatalf("artifacts = %v, want [manifest, cog]", out.Artifacts)
			}
			var manifest map[string]any
			if err := json.Unmarshal(workertest.ReadArtifact(t, out.Artifacts[0]), &manifest); err != nil || !equalJSON(manifest, want) {
				t.Errorf("cog.json = %v (%v), want %v", manifest, err, want)
			}
			cog, err := os.ReadFile(filepath.Join(stepDir, "cog.tif"))
			if err != nil || !bytes.Equal(cog, tc.source) {
				t.Errorf("cog.tif differs from the source (%d bytes, %v)", len(cog), err)
			}
		})
	}
}

// The workflow's data flow: validate's blob_url becomes the conversion's
// source_url, and a second run of the same attempt replaces its files whole.
func TestValidateThenConvertIsRepeatable(t *testing.T) {
	t.Parallel()
	input := []byte("II*\x00 a tiny tiff header and some pixels")
	d := directive(t, raster.HandlerValidate, input, map[string]any{"container_name": "c", "blob_name": "b.tif"})
	v, _, err := workertest.Execute(t, raster.NewExecutor(), d)
	if err != nil {
		t.Fatal(err)
	}
	conv := directive(t, raster.HandlerCOGFA, nil, map[string]any{"source_url": v.Output["blob_url"], "target_crs": "EPSG:4326"})
	var first string
	for range 2 {
		out, task, err := workertest.Execute(t, raster.NewExecutor(), conv)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = out.Output["sha256"].(string)
		} else if out.Output["sha256"] != first {
			t.Errorf("second run sha256 = %v, want %s", out.Output["sha256"], first)
		}
		entries, _ := os.ReadDir(task.StepDir())
		if len(entries) != 2 {
			t.Errorf("step directory holds %d entries, want cog.tif and cog.json", len(entries))
		}
	}
	sum := sha256.Sum256(input)
	if first != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 = %s, want the input's", first)
	}
}

func TestUnknownHandlerFailsPermanently(t *testing.T) {
	t.Parallel()
	d := directive(t, "raster_reproject", []byte{1}, nil)
	_, _, err := workertest.Execute(t, raster.NewExecutor(), d)
	wantPermanent(t, err, worker.CodeUnknownHandler,
		`handler "raster_reproject" is not served by service "raster" (known handlers: raster_cog_docker, raster_cog_fa, raster_validate)`)
}

func equalJSON(a, b map[string]any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
