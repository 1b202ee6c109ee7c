package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/nodeproc"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A client no one here wrote: openapi-typescript generates TypeScript types
// from the document the gateway serves at /openapi.json, tsc type-checks
// tools/tsclient/client.ts against them (a renamed field or path fails
// here), and node runs it through openapi-fetch against the suite: submit
// (202), get, list steps, cancel, and a missing job whose ErrorInfo reason
// it reads.
func TestTypeScriptClientGeneratedFromTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, modules, err := nodeproc.Install(ctx, "tsclient")
	if err != nil {
		t.Fatal(err)
	}
	s := startSuite(t, suiteOptions{})

	work := t.TempDir()
	res, err := s.httpc.Get("http://" + s.Endpoints.GatewayHTTP + "/openapi.json") // public: no token
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", res.StatusCode, doc)
	}
	files := map[string][]byte{"openapi.json": doc, "package.json": []byte(`{"type": "module"}` + "\n")}
	for _, f := range []string{"client.ts", "tsconfig.json"} {
		if files[f], err = os.ReadFile(filepath.Join(root, "tools", "tsclient", f)); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	node := func(env []string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, "node", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node %v: %v\n%s%s", args, err, out, stderr.Bytes())
		}
		return out
	}
	node(nil, "node_modules/openapi-typescript/bin/cli.js", "openapi.json", "-o", "schema.d.ts")
	node(nil, "node_modules/typescript/bin/tsc", "-p", ".")

	input := s.input("tsclient.txt", "typed from the contract\n")
	output, _ := s.output("tsclient.json")
	out := node([]string{"LUCIUS_URL=http://" + s.Endpoints.GatewayHTTP, "LUCIUS_TOKEN=" + s.partner("acme"),
		"LUCIUS_TENANT=acme", "LUCIUS_INPUT_REF=" + input, "LUCIUS_OUTPUT_REF=" + output}, "dist/client.js")
	var saw struct {
		JobID        string   `json:"job_id"`
		SubmitStatus int      `json:"submit_status"`
		JobStatus    string   `json:"job_status"`
		Steps        []string `json:"steps"`
		CancelStatus string   `json:"cancel_status"`
		ErrorStatus  int      `json:"error_status"`
		ErrorReason  string   `json:"error_reason"`
	}
	if err := json.Unmarshal(out, &saw); err != nil {
		t.Fatalf("the script printed %q: %v", out, err)
	}
	t.Logf("the TypeScript client printed %s", bytes.TrimSpace(out))
	if saw.SubmitStatus != http.StatusAccepted || saw.JobStatus == "" || len(saw.Steps) == 0 ||
		!slices.Contains([]string{"JOB_STATUS_CANCELLING", "JOB_STATUS_CANCELLED"}, saw.CancelStatus) ||
		saw.ErrorStatus != http.StatusNotFound || saw.ErrorReason != "JOB_NOT_FOUND" {
		t.Fatalf("the TypeScript client saw %+v", saw)
	}
	// What it did happened: the job it cancelled is cancelling (its step,
	// which no worker answers, holds it there) and says who asked.
	got, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: saw.JobID})
	if st := got.GetJob().GetStatus(); err != nil ||
		(st != luciusv1.JobStatus_JOB_STATUS_CANCELLING && st != luciusv1.JobStatus_JOB_STATUS_CANCELLED) {
		t.Fatalf("job %s: %v %v, want CANCELLING or CANCELLED", saw.JobID, st, err)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CANCEL_REQUESTED'`, saw.JobID); n != 1 {
		t.Fatalf("%d CANCEL_REQUESTED events", n)
	}
}
