package e2e

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A paused orchestrator (SIGSTOP: a long GC pause, a frozen VM) loses its jobs
// to another instance after the orphan threshold. Resumed, it still believes
// it owns them: every write it makes names its old epoch and is rejected,
// logged and recorded; the jobs finish once, under the new owner.
func TestZombieOrchestratorIsFencedAndNothingRunsTwice(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_HEARTBEAT_INTERVAL":   "300ms",
		"LUCIUS_ORPHAN_THRESHOLD":     "1500ms",
		"LUCIUS_ORPHAN_SCAN_INTERVAL": "300ms",
		"LUCIUS_JOBS_LOCK_DURATION":   "3s",
		"LUCIUS_WORKER_DELAY":         "1s", // steps take this long, so jobs are in flight at the pause
	}})
	ids := s.submitMany("zombie", 12)
	victim, zombie, rescuer := s.ownedRunningJob()
	if err := s.Signal(zombie, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Another instance reclaims the job at a higher epoch.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var owner string
		var epoch int64
		if err := s.pool.QueryRow(s.ctx, `SELECT owner_id, owner_epoch FROM jobs WHERE job_id = $1`, victim).Scan(&owner, &epoch); err != nil {
			t.Fatal(err)
		}
		if owner == rescuer && epoch >= 2 {
			break
		}
		if time.Now().After(deadline) {
			s.Signal(zombie, syscall.SIGCONT) //nolint:errcheck
			t.Fatalf("job %s still owned by %s@%d", victim, owner, epoch)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Signal(zombie, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Its next heartbeat names epoch 1: rejected and recorded.
	deadline = time.Now().Add(15 * time.Second)
	for s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'WRITE_FENCED'
		AND data->>'owner' = $2 AND (data->>'epoch')::int = 1`, victim, zombie) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the zombie's write was not recorded as fenced")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !s.logs.Contains("write fenced") {
		t.Fatal("the fenced write was not logged")
	}
	if metrics := s.scrape(s.Endpoints.OrchHTTP[slices.Index(orchestrators[:], zombie)]); !strings.Contains(metrics, "lucius_orchestrator_fenced_writes_total") {
		t.Fatalf("%s does not count fenced writes", zombie)
	}
	for _, id := range ids {
		if job := s.waitJob(id, 90*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("job %s ended %s (%s)", id, job.GetStatus(), job.GetReason())
		}
	}
	var owner string
	if err := s.pool.QueryRow(s.ctx, `SELECT owner_id FROM jobs WHERE job_id = $1`, victim).Scan(&owner); err != nil || owner != rescuer {
		t.Fatalf("the zombie took the job back: owner %s (%v)", owner, err)
	}
	s.assertEffectsOnce(ids)
}

// assertEffectsOnce checks every succeeded step committed exactly one effect
// in the workers' store and succeeded exactly once in the ledger's trail.
func (s *suite) assertEffectsOnce(ids []string) {
	s.t.Helper()
	var steps, effects, successes int
	err := s.pool.QueryRow(s.ctx, `SELECT
		(SELECT count(*) FROM steps WHERE job_id = ANY($1) AND kind = 'task' AND status = 'SUCCEEDED'),
		(SELECT count(*) FROM worker_effects WHERE job_id = ANY($1)),
		(SELECT count(*) FROM job_events WHERE job_id = ANY($1) AND type = 'STEP_STATUS_CHANGED' AND to_status = 'SUCCEEDED'
		   AND step_id IN ('ocr', 'embedding', 'sis', 'manual'))`, ids).Scan(&steps, &effects, &successes)
	if err != nil {
		s.t.Fatal(err)
	}
	if steps != 3*len(ids) || effects != steps || successes != steps {
		s.t.Fatalf("%d succeeded steps (want %d), %d effects, %d SUCCEEDED transitions", steps, 3*len(ids), effects, successes)
	}
}

func (s *suite) scrape(addr string) string {
	s.t.Helper()
	resp, err := s.metrics(addr)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// A step nobody acknowledges is retried by the ACK sweeper, then fails for
// good into a dead letter; replaying the job runs the step again with a new
// attempt, which a worker (the test) acknowledges, heartbeats and finishes.
func TestUnacknowledgedStepIsRetriedDeadLetteredAndReplayed(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_SWEEP_ACK_INTERVAL":   "200ms",
		"LUCIUS_SWEEP_LEASE_INTERVAL": "200ms",
	}})
	code, body := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "E2E_FLAKY",
		"schema_version": "1", "input_ref": "file://" + s.inputs + "/in", "output_ref": "file://" + s.inputs + "/out", "payload": map[string]any{}})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, body)
	}
	id := body["job_id"].(string)
	job := s.waitJob(id, 30*time.Second)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL || !strings.Contains(job.GetReason(), "MAX_ATTEMPTS_EXHAUSTED") {
		t.Fatalf("job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'ACK_TIMEOUT'`, id); n != 2 {
		t.Fatalf("%d ACK_TIMEOUT events, want 2", n)
	}
	code, list := s.rest("GET", "/v1/deadletters?job_id="+id, nil)
	letters, _ := list["dead_letters"].([]any)
	if code != http.StatusOK || len(letters) != 1 {
		t.Fatalf("dead letters: %d %v", code, list)
	}
	if dl := letters[0].(map[string]any); dl["kind"] != "DEAD_LETTER_KIND_STEP" || dl["reason"] != "MAX_ATTEMPTS_EXHAUSTED" || dl["step_id"] != "manual" {
		t.Fatalf("dead letter %v", dl)
	}

	code, replayed := s.rest("POST", "/v1/jobs/"+id+":replay", map[string]any{"reason": "worker deployed"})
	if code != http.StatusOK {
		t.Fatalf("replay: %d %v", code, replayed)
	}
	replayID := replayed["job"].(map[string]any)["job_id"].(string)
	if by, _ := replayed["job"].(map[string]any)["submitted_by"].(string); !strings.Contains(by, "#") {
		t.Fatalf("the replay's submitted_by %q is not the operator's principal", by)
	}
	// The replay has a fresh budget of two attempts after the original's two.
	// The test plays the worker, and on a loaded machine it can miss attempt
	// 3's 1s ACK window (its ACK arrives late, or its poll never sees the
	// step awaiting it); the sweeper then retries, and attempt 4 is the one
	// the test answers. Either way the replay runs the step anew.
	cb := s.callbacks(0, "manual")
	jobID, stepID := replayID, "manual"
	var attempt int32
	var leaseID, token string
	for seen := int32(2); ; {
		step := s.waitStepAttempt(replayID, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, seen+1)
		attempt, leaseID = step.GetAttemptNo(), step.GetAttempts()[len(step.GetAttempts())-1].GetLeaseId()
		if attempt > 4 {
			t.Fatalf("the replayed step runs attempt %d, want 3 or 4 (after the original's 2)", attempt)
		}
		token = s.callbackToken(jobID, stepID, attempt)
		r, err := cb.Ack(s.ctx, &luciusv1.AckRequest{JobId: jobID, StepId: stepID, AttemptNo: attempt, LeaseId: leaseID,
			AckTime: timestamppb.Now(), WorkerId: "e2e", CallbackToken: token})
		if err == nil && r.GetOutcome() == luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
			break
		}
		timedOut := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'ACK_TIMEOUT' AND attempt_no = $2`,
			replayID, attempt) == 1
		if attempt == 4 || !timedOut {
			t.Fatalf("ack of attempt %d: %v %v (ACK timed out first: %t)", attempt, r, err, timedOut)
		}
		t.Logf("attempt %d timed out before the test's ACK; answering the retry", attempt)
		seen = attempt
	}
	if attempt == 4 {
		// Attempt 3 was skipped over only because its ACK window closed.
		if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'ACK_TIMEOUT' AND attempt_no = 3`, replayID); n != 1 {
			t.Fatalf("attempt 4 runs but attempt 3 has %d ACK_TIMEOUT events", n)
		}
	}
	// Heartbeats keep a 2s lease alive for 3s.
	progress, _ := structpb.NewStruct(map[string]any{"percent": 50})
	for range 6 {
		r, err := cb.Heartbeat(s.ctx, &luciusv1.HeartbeatRequest{JobId: jobID, StepId: stepID, AttemptNo: attempt, LeaseId: leaseID,
			Progress: progress, WorkerId: "e2e", CallbackToken: token})
		if err != nil || r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED || r.GetLeaseExpireTime() == nil ||
			r.GetCallbackToken() == "" {
			t.Fatalf("heartbeat: %v %v", r, err)
		}
		token = r.GetCallbackToken() // it expires with the extended lease
		time.Sleep(500 * time.Millisecond)
	}
	steps, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: replayID})
	if err != nil {
		t.Fatal(err)
	}
	last := steps.GetSteps()[0].GetAttempts()[len(steps.GetSteps()[0].GetAttempts())-1]
	if last.GetProgress().GetFields()["percent"].GetNumberValue() != 50 || last.GetLeaseExpireTime() == nil {
		t.Fatalf("attempt %+v lacks progress or lease", last)
	}
	if r, err := cb.Result(s.ctx, &luciusv1.ResultRequest{JobId: jobID, StepId: stepID, AttemptNo: attempt, LeaseId: leaseID,
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now(), CallbackToken: token}); err != nil ||
		r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("result: %v %v", r, err)
	}
	if job := s.waitJob(replayID, 10*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED || job.GetReplayOf() != id {
		t.Fatalf("replay ended %s (replay_of %s)", job.GetStatus(), job.GetReplayOf())
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'LEASE_EXPIRED'`, replayID); n != 0 {
		t.Fatalf("%d LEASE_EXPIRED events despite heartbeats", n)
	}
	if orig := s.waitJob(id, time.Second); orig.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL {
		t.Fatalf("the original job changed to %s", orig.GetStatus())
	}
}

// A real worker whose work outlasts the step's lease keeps it with
// heartbeats; an attempt that stops heartbeating loses it to a retry.
func TestWorkerHeartbeatsKeepALongStepAlive(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_WORKER_FAULTS":        "true",
		"LUCIUS_SWEEP_LEASE_INTERVAL": "200ms",
	}})
	out, _ := s.output("slow.txt")
	payload, _ := structpb.NewStruct(map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 5000}})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "E2E_SLOW_OCR", SchemaVersion: "1", InputRef: s.input("slow.txt", sampleText), OutputRef: out, Payload: payload}})
	if err != nil {
		t.Fatal(err)
	}
	job := s.waitJob(resp.GetJobId(), 60*time.Second)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	if n := s.count(`SELECT count(*) FROM attempts WHERE job_id = $1`, job.GetJobId()); n != 1 {
		t.Fatalf("%d attempts, want 1: heartbeats should have kept the lease", n)
	}
	if n := s.count(`SELECT count(*) FROM attempts WHERE job_id = $1 AND last_heartbeat_at IS NOT NULL`, job.GetJobId()); n != 1 {
		t.Fatal("no heartbeat recorded on the attempt")
	}
}

// A message an orchestrator cannot read is dead-lettered by the bus consumer;
// the reconciler collects it into the ledger, where DeadLetterService shows it.
// A request whose queue message was lost is enqueued again and runs.
func TestBusDeadLettersAreListedAndStrandedRequestsRun(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_SWEEP_DEADLETTER_INTERVAL": "200ms",
		"LUCIUS_SWEEP_REQUESTS_INTERVAL":   "200ms",
		"LUCIUS_SWEEP_REQUESTS_AGE":        "1s",
	}})
	b, err := s.OpenBus(s.ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(s.ctx) //nolint:errcheck
	sender, err := b.NewSender(s.ctx, "orchestrator-jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(s.ctx) //nolint:errcheck
	if err := sender.Send(s.ctx, bus.Message{ID: "poison-1", Body: []byte("not a job"), Properties: map[string]string{"job_id": "poisoned"}}); err != nil {
		t.Fatal(err)
	}
	var letter map[string]any
	deadline := time.Now().Add(60 * time.Second)
	for letter == nil {
		code, list := s.rest("GET", "/v1/deadletters?kind=DEAD_LETTER_KIND_BUS", nil)
		if letters, _ := list["dead_letters"].([]any); code == http.StatusOK && len(letters) > 0 {
			letter = letters[0].(map[string]any)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poison message never showed as a dead letter: %d %v", code, list)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if letter["message_id"] != "poison-1" || letter["reason"] != "PoisonMessage" || letter["body"] != "not a job" ||
		!strings.HasPrefix(letter["entity"].(string), "orchestrator-jobs") {
		t.Fatalf("dead letter %v", letter)
	}

	// Lose an accepted request's queue message: take it off the queue unread.
	out, _ := s.output("stranded.json")
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"lost"}})
	for _, o := range orchestrators {
		if err := s.Signal(o, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input("stranded.txt", sampleText), OutputRef: out, Payload: payload}})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := b.NewReceiver(s.ctx, bus.QueueSource("orchestrator-jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(s.ctx) //nolint:errcheck
	msgs, err := rcv.Receive(s.ctx, 1)
	if err != nil || len(msgs) != 1 || msgs[0].Properties["job_id"] != resp.GetJobId() {
		t.Fatalf("take the request's message: %v %v", msgs, err)
	}
	if err := rcv.Complete(s.ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	for _, o := range orchestrators {
		if err := s.Signal(o, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	if job := s.waitJob(resp.GetJobId(), 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("stranded job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'JOB_REQUEST_REQUEUED'`, resp.GetJobId()); n != 1 {
		t.Fatalf("%d JOB_REQUEST_REQUEUED events, want 1", n)
	}
}
