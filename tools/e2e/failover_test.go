package e2e

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Killing an orchestrator while it owns jobs in flight: the other instance
// reclaims them (epoch 2, OWNER_CHANGED) and every job still finishes.
func TestKilledOrchestratorsJobsFinishOnTheOther(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_HEARTBEAT_INTERVAL":   "300ms",
		"LUCIUS_ORPHAN_THRESHOLD":     "1500ms",
		"LUCIUS_ORPHAN_SCAN_INTERVAL": "300ms",
		"LUCIUS_JOBS_LOCK_DURATION":   "3s",
		"LUCIUS_WORKER_DELAY":         "1200ms", // each step takes this long, so jobs are in flight at the kill
	}})
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"invoices"}})
	var ids []string
	for i := range 16 {
		out, _ := s.output(fmt.Sprintf("failover-%d.json", i))
		resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: fmt.Sprintf("tenant-%d", i),
			RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input(fmt.Sprintf("f%d.txt", i), sampleText),
			OutputRef: out, Payload: payload}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetJobId())
	}
	// Wait until orchestrator-1 owns a job whose first step is running: it has
	// two more steps to go, longer than the orphan threshold.
	var victim string
	deadline := time.Now().Add(30 * time.Second)
	for victim == "" {
		err := s.pool.QueryRow(s.ctx, `SELECT j.job_id FROM jobs j JOIN steps st ON st.job_id = j.job_id
			WHERE j.owner_id = 'orchestrator-1' AND j.completed_at IS NULL AND st.step_id = 'ocr' AND st.status = 'IN_PROGRESS'
			LIMIT 1`).Scan(&victim)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("orchestrator-1 never owned a running job: %v", err)
		}
		if victim == "" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := s.Kill("orchestrator-1"); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	for _, id := range ids {
		if job := s.waitJob(id, 90*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("job %s ended %s (%s)", id, job.GetStatus(), job.GetReason())
		}
	}
	t.Logf("all %d jobs succeeded %s after the kill", len(ids), time.Since(killedAt).Round(time.Millisecond))
	var owner string
	var epoch int64
	if err := s.pool.QueryRow(s.ctx, `SELECT owner_id, owner_epoch FROM jobs WHERE job_id = $1`, victim).Scan(&owner, &epoch); err != nil {
		t.Fatal(err)
	}
	if owner != "orchestrator-2" || epoch < 2 {
		t.Fatalf("job %s owned by %s at epoch %d after the kill, want orchestrator-2 at epoch >= 2", victim, owner, epoch)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'OWNER_CHANGED'`, victim); n != 1 {
		t.Fatalf("%d OWNER_CHANGED events for the reclaimed job, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM jobs WHERE owner_id = 'orchestrator-1' AND completed_at IS NULL`); n != 0 {
		t.Fatalf("%d live jobs still owned by the dead orchestrator", n)
	}
}
