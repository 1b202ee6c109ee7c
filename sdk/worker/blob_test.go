package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lucius-platform/lucius/base/azuritetest"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// useAzurite points the env's runner at a fresh Azurite with a container
// "data" and returns a store to put inputs and read outputs with.
func (e *env) useAzurite() blob.Store {
	e.t.Helper()
	az := azuritetest.Start(e.t)
	az.CreateContainer(e.t, "data")
	e.cfg.Azure = blob.AzureConfig{Endpoints: map[string]string{az.Account: az.Endpoint},
		Credential: blob.CredentialSharedKey, AccountKeys: map[string]string{az.Account: az.Key}}
	store, err := blob.NewAzure(e.cfg.Azure, e.cfg.Egress)
	if err != nil {
		e.t.Fatal(err)
	}
	return store
}

// resultsByJob is the RESULTs the fake orchestrator received, by job.
func (e *env) resultsByJob() map[string]*luciusv1.ResultRequest {
	_, results := e.orch.calls()
	byJob := map[string]*luciusv1.ResultRequest{}
	for _, r := range results {
		byJob[r.GetJobId()] = r
	}
	return byJob
}

// A final step whose input and output are az:// refs reads the blob, and
// writes output_ref as a blob with the artifact's SHA-256 and size in the
// RESULT; a missing input blob fails the step for good.
func TestRunnerReadsAndWritesAzureBlobRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	store := e.useAzurite()
	if _, err := store.Write(ctx, "az://devstoreaccount1/data/in/doc.txt", strings.NewReader("blob words\n"), blob.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive("az://devstoreaccount1/data/in/doc.txt")
	d.FinalStep, d.OutputRef = true, "az://devstoreaccount1/data/out/"+d.GetJobId()+"/"
	missing := e.directive("az://devstoreaccount1/data/in/missing.txt")
	e.publish(d, msgID(d, ""), nil)
	e.publish(missing, msgID(missing, ""), nil)
	e.waitFor("RESULTs", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()

	byJob := e.resultsByJob()
	res := byJob[d.GetJobId()]
	arts := res.GetArtifacts()
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || len(arts) != 2 || arts[1].GetName() != "output" {
		t.Fatalf("RESULT %v %s, artifacts %v", res.GetStatus(), res.GetReason(), arts)
	}
	wantURI := d.GetOutputRef() + "output.txt"
	got, err := blob.ReadAll(ctx, store, wantURI, 100)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "BLOB WORDS\n" || arts[1].GetUri() != wantURI || arts[1].GetSha256() != sha256Hex(got) ||
		arts[1].GetSizeBytes() != int64(len(got)) {
		t.Errorf("output blob %q, artifact %v", got, arts[1])
	}
	failed := byJob[missing.GetJobId()]
	if failed.GetFailureClass() != luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE ||
		!strings.HasPrefix(failed.GetReason(), worker.CodeInputNotFound+": ") {
		t.Errorf("missing input: %v %s", failed.GetFailureClass(), failed.GetReason())
	}
}

// An output over the inline limit does not fail the step: it is written
// whole to the step's directory and the RESULT carries the claim check. An
// output within the limit travels inline as before.
func TestRunnerSpillsOutputOverTheInlineLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.cfg.InlineOutputLimit = 1024
	big := strings.Repeat("x", 4096)
	e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
		in, err := task.ReadInput(ctx)
		if err != nil {
			return worker.Result{}, err
		}
		if _, err := task.WriteArtifact(ctx, "text", "output.txt", "text/plain", []byte("primary")); err != nil {
			return worker.Result{}, err
		}
		if string(in) == "small" {
			return worker.Result{Output: map[string]any{"rows": "few"}}, nil
		}
		return worker.Result{Output: map[string]any{"rows": big, "n": 1}}, nil
	}))
	d := e.directive(e.writeInput("big.txt", []byte("big")))
	small := e.directive(e.writeInput("small.txt", []byte("small")))
	e.publish(d, msgID(d, ""), nil)
	e.publish(small, msgID(small, ""), nil)
	e.waitFor("RESULTs", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()

	byJob := e.resultsByJob()
	if res := byJob[small.GetJobId()]; len(res.GetArtifacts()) != 1 || res.GetOutput().AsMap()["rows"] != "few" {
		t.Errorf("small output: %v, artifacts %v", res.GetOutput().AsMap(), res.GetArtifacts())
	}
	res := byJob[d.GetJobId()]
	arts := res.GetArtifacts()
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || len(arts) != 2 ||
		arts[0].GetName() != "text" || arts[1].GetName() != worker.SpilledOutputArtifact {
		t.Fatalf("RESULT %v %s, artifacts %v", res.GetStatus(), res.GetReason(), arts)
	}
	claim, _ := res.GetOutput().AsMap()[worker.SpilledOutputKey].(map[string]any)
	if len(res.GetOutput().GetFields()) != 1 || claim["uri"] != arts[1].GetUri() || claim["sha256"] != arts[1].GetSha256() {
		t.Fatalf("output %v, artifact %v", res.GetOutput().AsMap(), arts[1])
	}
	p, err := blob.LocalPath(arts[1].GetUri())
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var spilled map[string]any
	if err := json.Unmarshal(body, &spilled); err != nil || spilled["rows"] != big || spilled["n"] != float64(1) ||
		sha256Hex(body) != arts[1].GetSha256() || int64(len(body)) != arts[1].GetSizeBytes() {
		t.Errorf("spilled file %s: %.80q (%v)", p, body, err)
	}
}

// A workspace in Azure Blob Storage: the attempt's artifacts and its
// checkpoints are blobs under it, a retried attempt reads the checkpoint,
// and the local scratch folder the handler used is gone afterwards.
func TestRunnerWritesArtifactsAndCheckpointsToABlobWorkspace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	store := e.useAzurite()
	var (
		scratch  string
		resumed  []byte
		attempts counter
	)
	e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
		attempts.inc()
		scratch = task.StepDir()
		if err := os.WriteFile(scratch+"/notes.txt", []byte("local"), 0o644); err != nil {
			return worker.Result{}, err
		}
		if data, ok, err := task.Checkpoint(ctx, "progress"); err != nil {
			return worker.Result{}, err
		} else if ok {
			resumed = data
		}
		if err := task.SaveCheckpoint(ctx, "progress", []byte("half")); err != nil {
			return worker.Result{}, err
		}
		if _, err := task.WriteArtifact(ctx, "text", "pages/out.txt", "text/plain", []byte("done")); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{}, nil
	}))
	d := e.directive(e.writeInput("in.txt", []byte("x")))
	d.WorkspaceRef = "az://devstoreaccount1/data/lucius/acme/" + d.GetJobId() + "/"
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	retry := proto.Clone(d).(*luciusv1.Directive)
	retry.AttemptNo, retry.LeaseId = 2, uuid.NewString()
	e.publish(retry, msgID(retry, ""), nil)
	e.waitFor("second RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()

	_, results := e.orch.calls()
	want := d.GetWorkspaceRef() + "ocr/2/pages/out.txt"
	arts := results[1].GetArtifacts()
	if results[1].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || len(arts) != 1 || arts[0].GetUri() != want {
		t.Fatalf("RESULT %v %s, artifacts %v; want the artifact at %s", results[1].GetStatus(), results[1].GetReason(), arts, want)
	}
	if got, err := blob.ReadAll(ctx, store, want, 100); err != nil || string(got) != "done" {
		t.Errorf("artifact blob %q (%v)", got, err)
	}
	if got, err := blob.ReadAll(ctx, store, d.GetWorkspaceRef()+"checkpoints/ocr/progress", 100); err != nil || string(got) != "half" {
		t.Errorf("checkpoint blob %q (%v)", got, err)
	}
	if string(resumed) != "half" || attempts.get() != 2 {
		t.Errorf("attempt 2 read checkpoint %q after %d attempts, want attempt 1's", resumed, attempts.get())
	}
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Errorf("scratch folder %s still there (%v)", scratch, err)
	}
}
