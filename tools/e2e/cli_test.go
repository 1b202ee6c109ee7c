package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// cli runs the lucius binary against the suite as token's holder and
// returns its stdout, stderr and exit code.
func (s *suite) cli(token string, args ...string) (string, string, int) {
	s.t.Helper()
	cmd := exec.CommandContext(s.ctx, filepath.Join(binDir, "lucius"), args...)
	cmd.Env = append(os.Environ(), "LUCIUS_ADDR="+s.Endpoints.GatewayGRPC, "LUCIUS_TOKEN="+token,
		"LUCIUS_CONFIG="+filepath.Join(s.t.TempDir(), "none.yaml"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		s.t.Fatalf("run lucius %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// Each command of the lucius CLI against a running suite: its output and
// its exit code.
func TestCLICommandsAndExitCodes(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_SWEEP_ACK_INTERVAL": "200ms"}})
	op := s.operator
	out, _ := s.output("cli.json")
	input := s.input("cli.txt", sampleText)

	type run struct {
		name     string
		token    string
		args     []string
		code     int
		contains []string
	}
	check := func(r run) string {
		t.Helper()
		stdout, stderr, code := s.cli(r.token, r.args...)
		if code != r.code {
			t.Fatalf("%s: lucius %s exited %d, want %d\nstdout:\n%s\nstderr:\n%s", r.name, strings.Join(r.args, " "), code, r.code, stdout, stderr)
		}
		for _, want := range r.contains {
			if !strings.Contains(stdout+stderr, want) {
				t.Fatalf("%s: output lacks %q\nstdout:\n%s\nstderr:\n%s", r.name, want, stdout, stderr)
			}
		}
		return stdout
	}

	// submit --wait follows the job and exits 0 when it SUCCEEDED; --input
	// and --output are the refs (issue 20's command, word for word).
	waited := check(run{"submit --wait", op, []string{"submit", "--tenant", "acme", "--type", "OCR_EMBEDDING_SIS", "--input", input,
		"--output", out, "--payload", `{"prompt_set":["when are invoices due?"]}`, "--priority", "3", "--wait"}, 0,
		[]string{"ocr", "embedding", "sis", "SUCCEEDED"}})
	var jobID string
	for _, line := range strings.Split(waited, "\n") {
		if v, ok := strings.CutPrefix(line, "job_id"); ok {
			jobID = strings.TrimSpace(v)
		}
	}
	if len(jobID) != 64 {
		t.Fatalf("no job id in the submit output:\n%s", waited)
	}

	var got map[string]any
	if err := json.Unmarshal([]byte(check(run{"job get -o json", op, []string{"job", "get", jobID, "-o", "json"}, 0, nil})), &got); err != nil {
		t.Fatal(err)
	}
	if j := got["job"].(map[string]any); j["status"] != "JOB_STATUS_SUCCEEDED" || j["priority"] != float64(3) {
		t.Fatalf("job get -o json: %v", got)
	}
	check(run{"job steps", op, []string{"job", "steps", jobID}, 0, []string{"STEP", "ocr", "SUCCEEDED", "1/3"}})
	var steps struct {
		Steps []struct {
			StepID string `json:"step_id"`
			Status string `json:"status"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(check(run{"job steps -o json", op, []string{"job", "steps", jobID, "-o", "json"}, 0, nil})), &steps); err != nil {
		t.Fatal(err)
	}
	if len(steps.Steps) != 3 {
		t.Fatalf("job steps -o json lists %d steps, want the 3 that run work: %+v", len(steps.Steps), steps.Steps)
	}
	for _, st := range steps.Steps {
		if st.Status != "STEP_STATUS_SUCCEEDED" {
			t.Fatalf("step %s is %s", st.StepID, st.Status)
		}
	}
	check(run{"job steps --all", op, []string{"job", "steps", jobID, "--all"}, 0, []string{"START", "END", "ocr"}})
	// -o keeps naming the output format on submit.
	check(run{"submit -o json", op, []string{"submit", "--tenant", "acme", "--type", "OCR_EMBEDDING_SIS", "--input", input,
		"--output", out + ".json", "--payload", `{"prompt_set":["x"]}`, "-o", "json"}, 0, []string{`"job_id"`, `"status": "JOB_STATUS_RECEIVED"`}})
	check(run{"job events -o yaml", op, []string{"job", "events", jobID, "-o", "yaml"}, 0, []string{"type: JOB_ACCEPTED", "to_status: SUCCEEDED"}})
	check(run{"job list", op, []string{"job", "list", "--tenant", "acme", "--status", "succeeded"}, 0, []string{jobID, "OCR_EMBEDDING_SIS@1"}})
	check(run{"job watch of an ended job", op, []string{"job", "watch", jobID}, 0, []string{"SUCCEEDED"}})

	// A step nobody acknowledges fails for good: --wait exits 4, a dead letter is listed.
	flaky := check(run{"submit --wait of a failing job", op, []string{"submit", "--tenant", "acme", "--type", "E2E_FLAKY", "--input-ref", input,
		"--output-ref", out + ".flaky", "--wait"}, 4, []string{"FAILED_FINAL", "no ACK within", "MAX_ATTEMPTS_EXHAUSTED"}})
	flakyID := ""
	for _, line := range strings.Split(flaky, "\n") {
		if v, ok := strings.CutPrefix(line, "job_id"); ok {
			flakyID = strings.TrimSpace(v)
		}
	}
	dl := check(run{"dlq list", op, []string{"dlq", "list", "--job", flakyID, "-o", "json"}, 0, []string{"MAX_ATTEMPTS_EXHAUSTED"}})
	var dls map[string]any
	if err := json.Unmarshal([]byte(dl), &dls); err != nil {
		t.Fatal(err)
	}
	dlID := dls["dead_letters"].([]any)[0].(map[string]any)["dead_letter_id"].(string)
	check(run{"dlq show", op, []string{"dlq", "show", dlID}, 0, []string{"MAX_ATTEMPTS_EXHAUSTED", flakyID}})
	replayed := check(run{"dlq replay", op, []string{"dlq", "replay", dlID, "-o", "json"}, 0, []string{`"replay_of": "` + flakyID}})
	check(run{"job replay answers the same replay", op, []string{"job", "replay", flakyID, "-o", "json"}, 0,
		[]string{strings.Split(strings.Split(replayed, `"job_id": "`)[1], `"`)[0]}})

	// Cancel a job whose step is in flight: CANCELLING until the step ends.
	manual := check(run{"submit a manual job", op, []string{"submit", "--tenant", "acme", "--type", "E2E_MANUAL", "--input-ref", input,
		"--output-ref", out + ".manual", "-o", "json"}, 0, []string{"job_id"}})
	var sub map[string]any
	if err := json.Unmarshal([]byte(manual), &sub); err != nil {
		t.Fatal(err)
	}
	check(run{"job cancel", op, []string{"job", "cancel", sub["job_id"].(string), "--reason", "cli test"}, 0, []string{"CANCEL", "cli test"}})

	// Workflows: list, the DAG as a tree, validation with positions, registration.
	check(run{"workflow list", op, []string{"workflow", "list"}, 0, []string{"OCR_EMBEDDING_SIS", "raster_processing"}})
	check(run{"workflow show", op, []string{"workflow", "show", "OCR_EMBEDDING_SIS"}, 0,
		[]string{"START (start)", "└── ", "OCR → ocr", "SIS → sis"}})
	dir := t.TempDir()
	good := filepath.Join(dir, "cli_flow.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("workflow_id: cli_flow\nversion: 1\nnodes:\n  START: {type: start, next: ocr}\n  ocr: {type: task, handler: OCR, next: END}\n  END: {type: end}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("workflow_id: bad\nversion: 1\nnodes:\n  START: {type: start, next: x}\n  x: {type: task, handler: NOPE, next: END}\n  END: {type: end}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(run{"workflow validate (valid)", op, []string{"workflow", "validate", good}, 0, []string{"valid"}})
	check(run{"workflow validate (invalid)", op, []string{"workflow", "validate", bad}, 1, []string{bad + ":5:", "NOPE"}})
	check(run{"workflow register", op, []string{"workflow", "register", good}, 0, []string{"cli_flow version 1 registered"}})

	// Operations.
	check(run{"breaker list", op, []string{"breaker", "list"}, 0, []string{"SERVICE", "STATE"}})
	check(run{"breaker show", op, []string{"breaker", "show", "ocr"}, 0, []string{"ocr", "CLOSED"}})
	// Workers announce themselves in the background, retrying until the gateway is up.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		stdout, _, code := s.cli(op, "worker", "list")
		if code == 0 && strings.Contains(stdout, "ocr") && strings.Contains(stdout, "OCR") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker list never showed ocr (exit %d):\n%s", code, stdout)
		}
	}

	// Live configuration and runbooks.
	check(run{"config get", op, []string{"config", "get"}, 0, []string{"default_mode: MODE_DEFAULT", "revision:"}})
	tenantCfg := filepath.Join(dir, "acme.yaml")
	if err := os.WriteFile(tenantCfg, []byte("max_active_jobs: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(run{"config set --tenant", op, []string{"config", "set", "--tenant", "acme", "-f", tenantCfg}, 0, []string{"max_active_jobs: 7"}})
	check(run{"config get --tenant", op, []string{"config", "get", "--tenant", "acme", "-o", "json"}, 0, []string{`"max_active_jobs": 7`}})
	check(run{"runbook list", op, []string{"runbook", "list"}, 0, []string{"RUNBOOK"}})
	check(run{"batch list of an unknown runbook", op, []string{"batch", "list", "--runbook", "nope"}, 6, []string{"RUNBOOK_NOT_FOUND"}})

	// Exit codes of what goes wrong.
	check(run{"not found", op, []string{"job", "get", strings.Repeat("0", 64)}, 6, []string{"JOB_NOT_FOUND"}})
	check(run{"bad input", op, []string{"submit", "--tenant", "acme", "--type", "OCR", "--input-ref", input, "--output-ref", out, "--priority", "11"}, 1,
		[]string{"command.priority"}})
	check(run{"a partner calls an operator command", s.partner("acme"), []string{"breaker", "list"}, 7, []string{"PermissionDenied"}})
	check(run{"no token", "", []string{"job", "list"}, 7, []string{"Unauthenticated"}})
	check(run{"missing argument", op, []string{"job", "get"}, 2, nil})
	check(run{"unknown output format", op, []string{"job", "list", "-o", "xml"}, 2, []string{"--output"}})
	check(run{"unknown flag", op, []string{"job", "list", "--nope"}, 2, nil})
	stdout, stderr, code := func() (string, string, int) {
		cmd := exec.CommandContext(s.ctx, filepath.Join(binDir, "lucius"), "job", "list", "--timeout", "2s")
		cmd.Env = append(os.Environ(), "LUCIUS_ADDR=127.0.0.1:1", "LUCIUS_TOKEN="+op, "LUCIUS_CONFIG="+filepath.Join(dir, "none.yaml"))
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return o.String(), e.String(), exit.ExitCode()
		}
		return o.String(), e.String(), 0
	}()
	if code != 3 {
		t.Fatalf("an unreachable server: exit %d, want 3\n%s%s", code, stdout, stderr)
	}
}

// `lucius job watch` without a job id follows a tenant's jobs: one NDJSON
// line per job-level change as it commits, until --for runs out, exit 0.
func TestCLIWatchesATenantsJobs(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	cmd := exec.CommandContext(s.ctx, filepath.Join(binDir, "lucius"), "job", "watch", "--tenant", "acme", "--for", "20s", "-o", "json")
	cmd.Env = append(os.Environ(), "LUCIUS_ADDR="+s.Endpoints.GatewayGRPC, "LUCIUS_TOKEN="+s.partner("acme"),
		"LUCIUS_CONFIG="+filepath.Join(t.TempDir(), "none.yaml"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the watch is open before the job is submitted
	outRef, _ := s.output("watched.json")
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme", RequestType: "OCR",
		SchemaVersion: "1", InputRef: s.input("watched.txt", sampleText), OutputRef: outRef, Payload: &structpb.Struct{}}})
	if err != nil {
		t.Fatal(err)
	}
	if job := s.waitJob(resp.GetJobId(), 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s", job.GetStatus())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lucius job watch --tenant: %v\n%s", err, errOut.String())
	}
	var statuses []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var change struct {
			Job struct {
				JobID string `json:"job_id"`
			} `json:"job"`
			Event struct {
				ToStatus string `json:"to_status"`
			} `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &change); err != nil {
			t.Fatalf("not an NDJSON line: %q (%v)", line, err)
		}
		if change.Job.JobID == resp.GetJobId() {
			statuses = append(statuses, change.Event.ToStatus)
		}
	}
	if len(statuses) == 0 || statuses[len(statuses)-1] != "SUCCEEDED" {
		t.Fatalf("watched changes of the job: %v, want them to end in SUCCEEDED\n%s", statuses, out.String())
	}
}
