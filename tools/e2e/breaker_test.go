package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// answerManual plays the worker of a MANUAL step: it acknowledges the
// attempt and sends its RESULT (a failure is RETRYABLE), both applied.
func (s *suite) answerManual(cb luciusv1.CallbackServiceClient, jobID string, attempt int32, status luciusv1.ResultStatus) *luciusv1.ResultResponse {
	s.t.Helper()
	var lease string
	if err := s.pool.QueryRow(s.ctx, `SELECT lease_id::text FROM attempts WHERE job_id = $1 AND step_id = 'manual' AND attempt_no = $2`,
		jobID, attempt).Scan(&lease); err != nil {
		s.t.Fatal(err)
	}
	token := s.callbackToken(jobID, "manual", attempt)
	if r, err := cb.Ack(s.ctx, &luciusv1.AckRequest{JobId: jobID, StepId: "manual", AttemptNo: attempt, LeaseId: lease,
		AckTime: timestamppb.Now(), WorkerId: "e2e", CallbackToken: token}); err != nil ||
		r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		s.t.Fatalf("ack of %s attempt %d: %v %v", jobID, attempt, r, err)
	}
	r, err := cb.Result(s.ctx, &luciusv1.ResultRequest{JobId: jobID, StepId: "manual", AttemptNo: attempt, LeaseId: lease,
		Status: status, FailureClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, Reason: "e2e", FinishTime: timestamppb.Now(),
		CallbackToken: token})
	if err != nil || r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		s.t.Fatalf("result of %s attempt %d: %v %v", jobID, attempt, r, err)
	}
	return r
}

// The manual service fails three attempts in a row: its breaker opens, new
// work for it waits READY (CIRCUIT_OPEN) with no directive out, operators see
// it (and partners may not); after the cool-down one held step goes out as a
// probe, its success closes the breaker, and work flows again. No job fails
// because of the breaker.
func TestCircuitBreakerOpensOnAFailingServiceAndClosesWhenItRecovers(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_BREAKER_MIN_ATTEMPTS": "3",
		"LUCIUS_BREAKER_COOL_DOWN":    "3s",
		"LUCIUS_BREAKER_PROBES":       "1",
		"LUCIUS_BREAKER_INTERVAL":     "250ms",
	}})
	n := 0
	submit := func() string {
		t.Helper()
		n++
		code, body := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "E2E_MANUAL",
			"schema_version": "1", "input_ref": "file://" + s.inputs + "/in", "output_ref": fmt.Sprintf("file://%s/out-%d", s.inputs, n),
			"payload": map[string]any{}})
		if code != http.StatusAccepted {
			t.Fatalf("submit: %d %v", code, body)
		}
		return body["job_id"].(string)
	}
	breaker := func() map[string]any {
		t.Helper()
		code, body := s.rest("GET", "/v1/circuitbreakers/manual", nil)
		if code != http.StatusOK {
			t.Fatalf("get breaker: %d %v", code, body)
		}
		return body
	}
	waitState := func(want string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			b := breaker()
			if cb, _ := b["circuit_breaker"].(map[string]any); cb["state"] == want {
				return cb
			}
			if time.Now().After(deadline) {
				t.Fatalf("the manual breaker never became %s: %v", want, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	cb := s.callbacks(0, "manual")
	var failing []string
	for range 3 {
		id := submit()
		s.waitStepAttempt(id, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, 1)
		s.answerManual(cb, id, 1, luciusv1.ResultStatus_RESULT_STATUS_FAILED)
		failing = append(failing, id)
	}
	opened := waitState("CIRCUIT_STATE_OPEN")
	if opened["attempts"] != float64(3) || opened["failure_rate"] != float64(1) || opened["updated_by"] != "reconciler" {
		t.Fatalf("the open breaker: %v", opened)
	}
	if code, _, _ := s.restAs(s.partner("acme"), "GET", "/v1/circuitbreakers", nil); code != http.StatusForbidden {
		t.Fatalf("a partner listing breakers: %d, want 403", code)
	}
	if m := s.scrapeAll(); m.sum("lucius_circuit_breaker_state", "service", "manual") != 1 {
		t.Fatalf("lucius_circuit_breaker_state{service=manual} = %v while open, want 1", m.sum("lucius_circuit_breaker_state", "service", "manual"))
	}

	// New work is held: READY, the reason says why, no directive.
	// Every process that dispatches reads the breakers each
	// LUCIUS_BREAKER_INTERVAL: a directive may still go out in that time.
	time.Sleep(2 * 250 * time.Millisecond)
	held := submit()
	step := s.waitStep(held, luciusv1.StepStatus_STEP_STATUS_READY)
	if !strings.Contains(step.GetReason(), "CIRCUIT_OPEN") || step.GetAttemptNo() != 0 {
		t.Fatalf("the held step: %v", step)
	}
	if n := s.count(`SELECT count(*) FROM outbox WHERE job_id = $1 AND kind = 'directive'`, held); n != 0 {
		t.Fatalf("%d directives for a held step", n)
	}
	if b := breaker()["circuit_breaker"].(map[string]any); b["held_steps"] != float64(1) {
		t.Fatalf("the breaker does not count its held step: %v", b)
	}

	// After the cool-down the held step goes out as the probe; it succeeds.
	s.waitStepAttempt(held, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, 1)
	waitState("CIRCUIT_STATE_HALF_OPEN")
	s.answerManual(cb, held, 1, luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED)
	closed := waitState("CIRCUIT_STATE_CLOSED")
	if closed["held_steps"] != nil && closed["held_steps"] != float64(0) {
		t.Fatalf("the closed breaker still holds steps: %v", closed)
	}
	if job := s.waitJob(held, 30*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("the probe's job: %s %s", job.GetStatus(), job.GetReason())
	}
	var states []string
	for _, tr := range breaker()["transitions"].([]any) {
		states = append([]string{tr.(map[string]any)["to_state"].(string)}, states...)
	}
	if got := strings.Join(states, ","); got != "CIRCUIT_STATE_OPEN,CIRCUIT_STATE_HALF_OPEN,CIRCUIT_STATE_CLOSED" {
		t.Fatalf("transitions: %s", got)
	}

	// Work flows again; an operator may reset a breaker (a closed one stays closed).
	s.waitStepAttempt(submit(), luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, 1)
	if code, body := s.rest("POST", "/v1/circuitbreakers/manual:reset", map[string]any{"reason": "e2e"}); code != http.StatusOK ||
		body["circuit_breaker"].(map[string]any)["state"] != "CIRCUIT_STATE_CLOSED" {
		t.Fatalf("reset: %d %v", code, body)
	}
	for _, id := range failing {
		if j, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: id}); err != nil || terminal(j.GetJob().GetStatus()) {
			t.Fatalf("failing job %s: %v %v (a breaker never fails a job)", id, j.GetJob().GetStatus(), err)
		}
	}
}
