package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// The metrics of seed 004 §12 are exported, under these exact names, by the
// processes that know them, after a run with a success, a retry on each
// track, a step failed into a dead letter and a bus dead letter: the
// orchestrators' and the reconciler's /metrics (and the gateway's, which
// may end jobs by cancelling them) are scraped and summed.
func TestSeedMetricsAreExportedWithPlausibleValuesAfterARun(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_SWEEP_ACK_INTERVAL":        "200ms",
		"LUCIUS_SWEEP_LEASE_INTERVAL":      "200ms",
		"LUCIUS_SWEEP_DEADLETTER_INTERVAL": "200ms",
		"LUCIUS_ORPHAN_SCAN_INTERVAL":      "300ms",
	}})

	// A success: three steps run by the real workers.
	out, _ := s.output("metrics.json")
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"when are invoices due?"}})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input("metrics.txt", sampleText), OutputRef: out, Payload: payload}})
	if err != nil {
		t.Fatal(err)
	}
	pipeline := resp.GetJobId()

	// A step nobody acknowledges: retried once on the ACK track, then failed
	// for good into a dead letter.
	code, body := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "E2E_FLAKY",
		"schema_version": "1", "input_ref": "file://" + s.inputs + "/in", "output_ref": "file://" + s.inputs + "/out", "payload": map[string]any{}})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, body)
	}
	flaky := body["job_id"].(string)

	// A step the test answers: a retryable failure (the execution track),
	// then a success after the 2s backoff, then the same RESULT again.
	code, body = s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "E2E_MANUAL",
		"schema_version": "1", "input_ref": "file://" + s.inputs + "/in", "output_ref": "file://" + s.inputs + "/out", "payload": map[string]any{}})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, body)
	}
	manual := body["job_id"].(string)
	cb := s.callbacks(0, "manual")
	answer := func(attempt int32, status luciusv1.ResultStatus) *luciusv1.ResultResponse {
		t.Helper()
		return s.answerManual(cb, manual, attempt, status)
	}
	s.waitStepAttempt(manual, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK, 1)
	if r := answer(1, luciusv1.ResultStatus_RESULT_STATUS_FAILED); r.GetStepStatus() != luciusv1.StepStatus_STEP_STATUS_FAILED_RETRY {
		t.Fatalf("a retryable failure left the step %s", r.GetStepStatus())
	}
	time.Sleep(2500 * time.Millisecond) // the retry's backoff: its dispatch is then
	answer(2, luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED)

	// A bus message nobody can read, dead-lettered on the bus and collected.
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
	if err := sender.Send(s.ctx, bus.Message{ID: "metrics-poison", Body: []byte("not a job")}); err != nil {
		t.Fatal(err)
	}

	for id, want := range map[string]luciusv1.JobStatus{pipeline: luciusv1.JobStatus_JOB_STATUS_SUCCEEDED,
		flaky: luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL, manual: luciusv1.JobStatus_JOB_STATUS_SUCCEEDED} {
		if job := s.waitJob(id, 60*time.Second); job.GetStatus() != want {
			t.Fatalf("job %s ended %s (%s), want %s", id, job.GetStatus(), job.GetReason(), want)
		}
	}
	var lease string
	if err := s.pool.QueryRow(s.ctx, `SELECT lease_id::text FROM attempts WHERE job_id = $1 AND attempt_no = 2`, manual).Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if r, err := cb.Result(s.ctx, &luciusv1.ResultRequest{JobId: manual, StepId: "manual", AttemptNo: 2, LeaseId: lease,
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now(),
		CallbackToken: s.callbackToken(manual, "manual", 2)}); err != nil || r.GetOutcome() != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		t.Fatalf("repeated RESULT: %v %v", r, err)
	}

	// Counters are added after their transaction commits and the bus dead
	// letter is collected in the background: scrape until all is there.
	var problems []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		problems = checkSeedMetrics(s.scrapeAll())
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(problems) > 0 {
		t.Fatalf("metrics after the run:\n%s", strings.Join(problems, "\n"))
	}
}

// seedFamilies are the families of seed 004 §12 with their type and label
// names, as Prometheus sees them.
var seedFamilies = map[string]struct {
	typ    string
	labels []string
}{
	"lucius_jobs_completed_total":        {"counter", []string{"status", "workflow"}},
	"lucius_job_duration_seconds":        {"histogram", []string{"status", "workflow"}},
	"lucius_step_duration_seconds":       {"histogram", []string{"handler", "status"}},
	"lucius_step_queue_seconds":          {"histogram", []string{"handler"}},
	"lucius_step_retries_total":          {"counter", []string{"handler", "track"}},
	"lucius_dead_letters_total":          {"counter", []string{"kind"}},
	"lucius_dead_letters_pending":        {"gauge", []string{"kind"}},
	"lucius_orchestrator_reclaims_total": {"counter", nil},
	"lucius_callbacks_total":             {"counter", []string{"kind", "outcome"}},
	"lucius_outbox_dispatch_lag_seconds": {"histogram", []string{"kind"}},
	"lucius_outbox_backlog":              {"gauge", nil},
	"lucius_outbox_oldest_age_seconds":   {"gauge", nil},
	"lucius_sweeper_actions_total":       {"counter", []string{"outcome", "sweeper"}},
	"lucius_circuit_breaker_state":       {"gauge", []string{"service"}},
}

// checkSeedMetrics lists what is missing or implausible in the run's metrics.
func checkSeedMetrics(m scraped) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for name, f := range seedFamilies {
		if got, ok := m.types[name]; !ok || got != f.typ {
			fail("family %s: type %q, want %q", name, got, f.typ)
			continue
		}
		for _, smp := range m.samples {
			if strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(smp.name, "_bucket"), "_sum"), "_count") != name {
				continue
			}
			keys := slices.Sorted(maps.Keys(smp.labels))
			keys = slices.DeleteFunc(keys, func(k string) bool { return k == "le" })
			if !slices.Equal(keys, f.labels) {
				fail("%s has labels %v, want %v", smp.name, keys, f.labels)
				break
			}
		}
	}
	for name := range m.types {
		if strings.HasSuffix(name, "_seconds_seconds") || strings.HasSuffix(name, "_total_total") {
			fail("family %s has its unit or suffix twice", name)
		}
	}
	atLeast := func(name string, min float64, labels ...string) {
		if v := m.sum(name, labels...); v < min {
			fail("%s%v = %v, want at least %v", name, labels, v, min)
		}
	}
	histogram := func(name string, labels ...string) {
		atLeast(name+"_count", 1, labels...)
		if v := m.sum(name+"_sum", labels...); v <= 0 {
			fail("%s_sum%v = %v, want more than 0", name, labels, v)
		}
	}
	atLeast("lucius_jobs_completed_total", 3)
	atLeast("lucius_jobs_completed_total", 1, "workflow", "OCR_EMBEDDING_SIS", "status", "SUCCEEDED")
	atLeast("lucius_jobs_completed_total", 1, "workflow", "E2E_MANUAL", "status", "SUCCEEDED")
	atLeast("lucius_jobs_completed_total", 1, "workflow", "E2E_FLAKY", "status", "FAILED_FINAL")
	histogram("lucius_job_duration_seconds", "workflow", "OCR_EMBEDDING_SIS", "status", "SUCCEEDED")
	histogram("lucius_job_duration_seconds", "workflow", "E2E_MANUAL", "status", "SUCCEEDED")
	atLeast("lucius_job_duration_seconds_sum", 2, "workflow", "E2E_FLAKY", "status", "FAILED_FINAL") // two 1s ACK timeouts
	for _, handler := range []string{"OCR", "EMBEDDING", "SIS", "MANUAL"} {
		histogram("lucius_step_duration_seconds", "handler", handler, "status", "SUCCEEDED")
		histogram("lucius_step_queue_seconds", "handler", handler)
	}
	histogram("lucius_step_duration_seconds", "handler", "MANUAL", "status", "FAILED_RETRY")
	atLeast("lucius_step_queue_seconds_count", 2, "handler", "MANUAL")
	atLeast("lucius_step_retries_total", 1, "handler", "MANUAL", "track", "ack")
	atLeast("lucius_step_retries_total", 1, "handler", "MANUAL", "track", "execution")
	atLeast("lucius_dead_letters_total", 1, "kind", "step")
	atLeast("lucius_dead_letters_total", 1, "kind", "bus")
	atLeast("lucius_dead_letters_pending", 1, "kind", "step")
	atLeast("lucius_dead_letters_pending", 1, "kind", "bus")
	atLeast("lucius_callbacks_total", 5, "kind", "ack", "outcome", "applied")
	atLeast("lucius_callbacks_total", 5, "kind", "result", "outcome", "applied")
	atLeast("lucius_callbacks_total", 1, "kind", "result", "outcome", "duplicate")
	for _, smp := range m.samples {
		if smp.name == "lucius_callbacks_total" && !slices.Contains([]string{"applied", "duplicate", "stale_attempt",
			"lease_mismatch", "after_terminal", "refused"}, smp.labels["outcome"]) {
			fail("lucius_callbacks_total has outcome %q", smp.labels["outcome"])
		}
	}
	if n := m.count("lucius_orchestrator_reclaims_total"); n != len(orchestrators) {
		fail("%d orchestrators report lucius_orchestrator_reclaims_total, want %d", n, len(orchestrators))
	}
	histogram("lucius_outbox_dispatch_lag_seconds")
	atLeast("lucius_outbox_dispatch_lag_seconds_count", 10) // three job requests, seven directives
	if m.count("lucius_outbox_backlog") == 0 {
		fail("no lucius_outbox_backlog")
	}
	if m.count("lucius_outbox_oldest_age_seconds") == 0 {
		fail("no lucius_outbox_oldest_age_seconds")
	}
	atLeast("lucius_sweeper_actions_total", 2, "sweeper", "ack_timeout")
	atLeast("lucius_sweeper_actions_total", 1, "sweeper", "dead_letters", "outcome", "COLLECTED")
	// Every service that ran attempts has a breaker, closed after this run.
	for _, service := range []string{"ocr", "embedding", "sis", "manual"} {
		if n := m.count("lucius_circuit_breaker_state", "service", service); n != 1 {
			fail("%d lucius_circuit_breaker_state samples for %s, want 1 (the reconciler's)", n, service)
		} else if v := m.sum("lucius_circuit_breaker_state", "service", service); v != 0 {
			fail("lucius_circuit_breaker_state{service=%q} = %v, want 0 (CLOSED)", service, v)
		}
	}
	return problems
}

// scraped is what the suite's processes export, every sample of each.
type scraped struct {
	types   map[string]string // family → counter, gauge, histogram
	samples []sample
}

// sample is one line of Prometheus's text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeAll scrapes the orchestrators, the reconciler and the gateway.
func (s *suite) scrapeAll() scraped {
	s.t.Helper()
	m := scraped{types: map[string]string{}}
	for _, addr := range append([]string{s.Endpoints.Reconciler, s.Endpoints.GatewayHTTP}, s.Endpoints.OrchHTTP...) {
		for _, line := range strings.Split(s.scrape(addr), "\n") {
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				if name, typ, ok := strings.Cut(rest, " "); ok {
					m.types[name] = typ
				}
				continue
			}
			if strings.HasPrefix(line, "lucius_") {
				smp, err := parseSample(line)
				if err != nil {
					s.t.Fatalf("%s/metrics: %v", addr, err)
				}
				m.samples = append(m.samples, smp)
			}
		}
	}
	return m
}

// sum totals the samples named name whose labels include the pairs given.
func (m scraped) sum(name string, labelPairs ...string) float64 {
	var v float64
	for _, smp := range m.samples {
		if smp.name == name && smp.has(labelPairs) {
			v += smp.value
		}
	}
	return v
}

// count is how many samples are named name (and have the label pairs).
func (m scraped) count(name string, labelPairs ...string) int {
	n := 0
	for _, smp := range m.samples {
		if smp.name == name && smp.has(labelPairs) {
			n++
		}
	}
	return n
}

func (smp sample) has(pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if smp.labels[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

// parseSample parses `name{k="v",…} value`.
func parseSample(line string) (sample, error) {
	smp := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		smp.name, rest = line[:i], line[i+1:]
		for !strings.HasPrefix(rest, "}") {
			key, after, ok := strings.Cut(rest, `="`)
			if !ok {
				return smp, fmt.Errorf("bad labels in %q", line)
			}
			var value strings.Builder
			j := 0
			for ; j < len(after) && after[j] != '"'; j++ {
				if after[j] == '\\' && j+1 < len(after) {
					j++
				}
				value.WriteByte(after[j])
			}
			if j == len(after) {
				return smp, fmt.Errorf("unterminated label value in %q", line)
			}
			smp.labels[key] = value.String()
			rest = strings.TrimPrefix(after[j+1:], ",")
		}
		rest = strings.TrimPrefix(rest, "}")
	} else if i >= 0 {
		smp.name, rest = line[:i], line[i:]
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if err != nil {
		return smp, fmt.Errorf("bad value in %q: %w", line, err)
	}
	smp.value = v
	return smp, nil
}
