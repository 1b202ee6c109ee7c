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
	ids := s.submitMany("failover", 16)
	victim, dead, survivor := s.ownedRunningJob()
	if err := s.Kill(dead); err != nil {
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
	if owner != survivor || epoch < 2 {
		t.Fatalf("job %s owned by %s at epoch %d after the kill, want %s at epoch >= 2", victim, owner, epoch, survivor)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'OWNER_CHANGED'`, victim); n != 1 {
		t.Fatalf("%d OWNER_CHANGED events for the reclaimed job, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM jobs WHERE owner_id = $1 AND completed_at IS NULL`, dead); n != 0 {
		t.Fatalf("%d live jobs still owned by the dead orchestrator", n)
	}
}

// submitMany submits n three-step jobs, each for its own tenant, and returns
// their ids.
func (s *suite) submitMany(name string, n int) []string {
	s.t.Helper()
	var ids []string
	for i := range n {
		out, _ := s.output(fmt.Sprintf("%s-%d.json", name, i))
		ids = append(ids, s.submitAs(fmt.Sprintf("tenant-%d", i), "OCR_EMBEDDING_SIS", map[string]any{"prompt_set": []any{name}},
			s.input(fmt.Sprintf("%s-%d.txt", name, i), sampleText), out, ""))
	}
	return ids
}

// orchestrators are the suite's two orchestrator processes, named as they
// own jobs.
var orchestrators = [2]string{"orchestrator-1", "orchestrator-2"}

// ownedRunningJob waits until an orchestrator owns a job whose first step is
// running (it has two more steps to go, longer than the orphan threshold)
// and returns the job, its owner and the other orchestrator. Either may own
// it: each receives up to its concurrency of jobs at once, so one can take
// them all.
func (s *suite) ownedRunningJob() (job, owner, other string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.pool.QueryRow(s.ctx, `SELECT j.job_id, j.owner_id FROM jobs j JOIN steps st ON st.job_id = j.job_id
			WHERE j.owner_id = ANY($1) AND j.completed_at IS NULL AND st.step_id = 'ocr' AND st.status = 'IN_PROGRESS'
			LIMIT 1`, orchestrators[:]).Scan(&job, &owner)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no orchestrator owned a running job: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	other = orchestrators[0]
	if owner == other {
		other = orchestrators[1]
	}
	return job, owner, other
}

// Seed 000's success criterion with the default timings (no overrides):
// an orchestrator killed while it owns a job, the job has a new owner within
// two minutes (heartbeat 15 s + orphan threshold 75 s + scan 30 s). The slack
// covers process scheduling on a busy machine, not the timings.
func TestAnOrphanIsReclaimedWithinTwoMinutes(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_LOG_LEVEL": "info"}})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: s.input("orphan.txt", "x"), OutputRef: "file://" + s.inputs + "/out/orphan",
		Payload: &structpb.Struct{}}})
	if err != nil {
		t.Fatal(err)
	}
	s.waitStep(resp.GetJobId(), luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK) // the test never answers: the job stays live
	var owner string
	if err := s.pool.QueryRow(s.ctx, `SELECT owner_id FROM jobs WHERE job_id = $1`, resp.GetJobId()).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(owner); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	const bound, slack = 120 * time.Second, 10 * time.Second
	for {
		var now string
		var epoch int64
		if err := s.pool.QueryRow(s.ctx, `SELECT owner_id, owner_epoch FROM jobs WHERE job_id = $1`, resp.GetJobId()).Scan(&now, &epoch); err != nil {
			t.Fatal(err)
		}
		if now != owner {
			if epoch != 2 {
				t.Fatalf("reclaimed at epoch %d, want 2", epoch)
			}
			t.Logf("reclaimed by %s %s after the kill", now, time.Since(killed).Round(time.Second))
			break
		}
		if time.Since(killed) > bound+slack {
			t.Fatalf("still owned by the killed %s %s after the kill", owner, time.Since(killed).Round(time.Second))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'OWNER_CHANGED'`, resp.GetJobId()); n != 1 {
		t.Fatalf("%d OWNER_CHANGED events, want 1", n)
	}
}
