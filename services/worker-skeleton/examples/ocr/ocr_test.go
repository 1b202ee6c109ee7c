package ocr_test

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/ocr"
)

func TestExecute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		input      string
		characters int
		lines      int
	}{
		{"ascii with trailing newline", "hello\nworld\n", 12, 2},
		{"no trailing newline", "one\ntwo", 7, 2},
		{"multibyte", "Grüße, 東京\n", 10, 1},
		{"empty", "", 0, 0},
		{"blank lines", "\n\n", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := workertest.Directive(t, "OCR", []byte(tc.input), nil)
			out, task, err := workertest.Execute(t, ocr.Executor{}, d)
			if err != nil {
				t.Fatal(err)
			}
			arts := task.Artifacts()
			if len(arts) != 1 || arts[0].GetName() != ocr.ArtifactName || arts[0].GetMediaType() != ocr.MediaType {
				t.Fatalf("artifacts = %v", arts)
			}
			if !strings.HasSuffix(arts[0].GetUri(), filepath.Join(d.GetJobId(), "ocr", "1", "output.txt")) {
				t.Errorf("artifact at %s, want <workspace>/ocr/1/output.txt", arts[0].GetUri())
			}
			if got := string(workertest.ReadArtifact(t, arts[0])); got != tc.input {
				t.Errorf("output.txt = %q, want the input %q", got, tc.input)
			}
			sum := sha256.Sum256([]byte(tc.input))
			if out.Output["characters"] != tc.characters || out.Output["lines"] != tc.lines ||
				out.Output["sha256"] != hex.EncodeToString(sum[:]) || out.Output["bytes"] != len(tc.input) {
				t.Errorf("output = %v, want %d characters, %d lines", out.Output, tc.characters, tc.lines)
			}
		})
	}
}

func TestExecuteRejectsNonUTF8Permanently(t *testing.T) {
	t.Parallel()
	d := workertest.Directive(t, "OCR", []byte("ok\xff\xfe"), nil)
	_, task, err := workertest.Execute(t, ocr.Executor{}, d)
	if !worker.IsPermanent(err) || !strings.Contains(err.Error(), "not UTF-8") || !strings.Contains(err.Error(), "offset 2") {
		t.Fatalf("err = %v, want a permanent not-UTF-8 failure naming offset 2", err)
	}
	if len(task.Artifacts()) != 0 {
		t.Error("an artifact was written for rejected input")
	}
}

func TestExecuteMissingInputIsPermanent(t *testing.T) {
	t.Parallel()
	d := workertest.Directive(t, "OCR", nil, nil)
	d.InputRef = d.GetInputRef() + ".missing"
	_, _, err := workertest.Execute(t, ocr.Executor{}, d)
	class, reason := worker.Classify(err)
	if !worker.IsPermanent(err) || !strings.HasPrefix(reason, worker.CodeInputNotFound) {
		t.Fatalf("Classify = %v %q", class, reason)
	}
}

// The contract kit: OCR in the real runtime against an in-memory bus and
// orchestrator.
func TestOCRMeetsTheWorkerContract(t *testing.T) {
	t.Parallel()
	workertest.CheckContract(t, "OCR", ocr.Executor{}, []byte("hello\nworld\n"))
}
