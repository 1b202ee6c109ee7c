package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A job whose input and output are Azure Blob Storage refs (az://, served
// by Azurite) runs OCR → EMBEDDING → SIS to SUCCEEDED: the OCR worker reads
// the input blob, the SIS worker uploads the result to output_ref and
// reports its SHA-256 and size. A job whose input blob does not exist fails
// for good at its first step, naming INPUT_NOT_FOUND.
func TestOCREmbeddingSISWithAzureBlobRefsReachesSucceeded(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{azurite: true})
	az := s.Azurite
	az.CreateContainer(t, "documents")
	az.CreateContainer(t, "results")
	if err := az.Put(s.ctx, "documents", "acme/contract 7.txt", []byte(sampleText)); err != nil {
		t.Fatal(err)
	}
	submit := func(input, output string) string {
		t.Helper()
		code, body := s.rest("POST", "/v1/commands", map[string]any{
			"tenant_id": "acme", "request_type": "OCR_EMBEDDING_SIS", "schema_version": "1",
			"input_ref": input, "output_ref": output,
			"payload": map[string]any{"prompt_set": []any{"when are invoices due?"}, "chunk_size": 60}})
		if code != http.StatusAccepted {
			t.Fatalf("submit answered %d: %v", code, body)
		}
		return body["job_id"].(string)
	}
	const output = "az://devstoreaccount1/results/acme/answer.json"
	okID := submit("az://devstoreaccount1/documents/acme/contract%207.txt", output)
	missingID := submit("az://devstoreaccount1/documents/acme/missing.txt", "az://devstoreaccount1/results/acme/never.json")

	job := s.waitJob(okID, 60*time.Second)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	steps, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: okID})
	if err != nil || len(steps.GetSteps()) != 3 {
		t.Fatalf("steps: %v, %v", steps.GetSteps(), err)
	}
	ocr, err := os.ReadFile(filePath(t, steps.GetSteps()[0].GetArtifacts()[0].GetUri()))
	if err != nil || string(ocr) != sampleText {
		t.Fatalf("OCR artifact %q (%v) is not the input blob's text", ocr, err)
	}
	result, err := az.Get(s.ctx, "results", "acme/answer.json")
	if err != nil {
		t.Fatalf("output blob: %v", err)
	}
	var answer struct {
		Matches []struct{ Excerpt string } `json:"matches"`
	}
	if err := json.Unmarshal(result, &answer); err != nil || len(answer.Matches) != 1 || !strings.Contains(answer.Matches[0].Excerpt, "Invoices") {
		t.Fatalf("output blob is not the SIS answer: %s", result)
	}
	var final *luciusv1.ArtifactRef
	for _, a := range steps.GetSteps()[2].GetArtifacts() {
		if a.GetUri() == output {
			final = a
		}
	}
	sum := sha256.Sum256(result)
	if final == nil || final.GetSha256() != hex.EncodeToString(sum[:]) || final.GetSizeBytes() != int64(len(result)) {
		t.Fatalf("SIS artifacts %v: want %s with sha256 %x and %d bytes", steps.GetSteps()[2].GetArtifacts(), output, sum, len(result))
	}

	failed := s.waitJob(missingID, 60*time.Second)
	if failed.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL {
		t.Fatalf("job with a missing input blob ended %s", failed.GetStatus())
	}
	steps, err = s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: missingID})
	if err != nil {
		t.Fatal(err)
	}
	if st := steps.GetSteps()[0]; st.GetStatus() != luciusv1.StepStatus_STEP_STATUS_FAILED_FINAL || !strings.Contains(st.GetReason(), "INPUT_NOT_FOUND") ||
		len(st.GetAttempts()) != 1 {
		t.Fatalf("OCR step %s after %d attempts: %s", st.GetStatus(), len(st.GetAttempts()), st.GetReason())
	}
}
