// Package workertest helps test an Executor without a bus: it builds valid
// directives over a temporary workspace, runs the executor on a worker.Task
// and reads artifacts back.
//
//	d := workertest.Directive(t, "OCR", []byte("hello"), nil)
//	out, task, err := workertest.Execute(t, ocr.Executor{}, d)
package workertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// Directive returns a valid first-attempt directive of stepType whose input
// file holds input and whose workspace is a fresh temporary directory.
// payload may be nil.
func Directive(t testing.TB, stepType string, input []byte, payload map[string]any) *luciusv1.Directive {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "input", "input.bin")
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, input, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := structpb.NewStruct(payload)
	if err != nil {
		t.Fatalf("workertest: payload: %v", err)
	}
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	jobID := hex.EncodeToString(id)
	return &luciusv1.Directive{
		JobId: jobID, TenantId: "acme", StepId: strings.ToLower(stepType), StepType: stepType,
		Service: strings.ToLower(stepType), AttemptNo: 1, LeaseId: "0f3c2b1a-9e8d-4c7b-a6f5-e4d3c2b1a090",
		InputRef: "file://" + in, JobInputRef: "file://" + in,
		WorkspaceRef: "file://" + dir + "/lucius/acme/" + jobID + "/",
		OutputRef:    "file://" + dir + "/output/",
		Payload:      p,
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: "127.0.0.1:9091"},
	}
}

// Execute runs exec on a task for d. The task's file roots are the system's
// temporary folder, where t.TempDir() and Directive put test files.
func Execute(t testing.TB, exec worker.Executor, d *luciusv1.Directive) (worker.Result, *worker.Task, error) {
	t.Helper()
	task, err := worker.NewTask(d, worker.TaskConfig{FileRoots: []string{os.TempDir()}})
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	out, err := exec.Execute(context.Background(), task)
	return out, task, err
}

// ReadArtifact reads the file an artifact points at.
func ReadArtifact(t testing.TB, ref *luciusv1.ArtifactRef) []byte {
	t.Helper()
	path, ok := strings.CutPrefix(ref.GetUri(), "file://")
	if !ok {
		t.Fatalf("workertest: artifact %s is not a local file: %s", ref.GetName(), ref.GetUri())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
