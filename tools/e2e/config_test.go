package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// configRevision reads lucius_config_revision from a process's /metrics.
func (s *suite) configRevision(addr string) int64 {
	s.t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s.scrape(addr)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "lucius_config_revision") {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err == nil {
				return int64(v)
			}
		}
	}
	s.t.Fatalf("%s/metrics has no lucius_config_revision", addr)
	return 0
}

// A tenant's mode changes while its job is in flight: every service applies
// the new configuration without a restart; the job's retry keeps the routing
// pinned when it was accepted; the tenant's next job routes the new way.
func TestConfigChangeReachesEveryServiceAndPinnedRoutingSurvivesIt(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_SWEEP_ACK_INTERVAL": "200ms"}})
	submit := func(docID string) string {
		t.Helper()
		resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "Mover",
			RequestType: "E2E_FLAKY", SchemaVersion: "1", InputRef: "file://" + s.inputs + "/in", OutputRef: "file://" + s.inputs + "/out",
			DocId: docID, Payload: &structpb.Struct{}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetJobId()
	}
	first := submit("doc-9")
	step := s.waitStep(first, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK)
	pinned := step.GetAttempts()[0].GetRouting()
	if pinned.GetResolvedMode() != "DEFAULT" || pinned.GetDecisionSource() != luciusv1.DecisionSource_DECISION_SOURCE_GLOBAL_CONFIG ||
		!strings.HasPrefix(pinned.GetTopic(), "global-default-p") {
		t.Fatalf("first attempt routed %+v", pinned)
	}

	code, body := s.rest("PUT", "/v1/config/tenants/mover", map[string]any{"mode": "MODE_BURST"})
	if code != http.StatusOK {
		t.Fatalf("update tenant: %d %v", code, body)
	}
	changed := time.Now()
	rev, _ := strconv.ParseInt(body["config"].(map[string]any)["revision"].(string), 10, 64)
	services := map[string]string{"gateway": s.Endpoints.GatewayHTTP, "orchestrator-1": s.Endpoints.OrchHTTP[0],
		"orchestrator-2": s.Endpoints.OrchHTTP[1], "reconciler": s.Endpoints.Reconciler, "scheduler": s.Endpoints.Scheduler}
	for name, addr := range services {
		deadline := time.Now().Add(30 * time.Second) // a hang guard; the figure is logged
		for s.configRevision(addr) < rev {
			if time.Now().After(deadline) {
				t.Fatalf("%s never applied revision %d", name, rev)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("revision %d applied by all %d services within %s (scrape-limited)", rev, len(services), time.Since(changed).Round(time.Millisecond))

	// Nobody acknowledges: the ACK sweeper retries with the pinned routing.
	deadline := time.Now().Add(30 * time.Second)
	var retry *luciusv1.Attempt
	for retry == nil {
		steps, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: first})
		if err == nil {
			if as := steps.GetSteps()[0].GetAttempts(); len(as) >= 2 {
				retry = as[1]
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no retry attempt")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := retry.GetRouting(); got.GetTopic() != pinned.GetTopic() || got.GetResolvedMode() != "DEFAULT" ||
		got.GetDecisionSource() != luciusv1.DecisionSource_DECISION_SOURCE_GLOBAL_CONFIG || got.GetPartition() != pinned.GetPartition() ||
		got.GetRoutingKeyUsed() != pinned.GetRoutingKeyUsed() {
		t.Fatalf("the retry was routed %+v, pinned %+v", got, pinned)
	}

	second := submit("doc-10") // another document: the same command again would be the same job
	now := s.waitStep(second, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK).GetAttempts()[0].GetRouting()
	if now.GetResolvedMode() != "BURST" || now.GetDecisionSource() != luciusv1.DecisionSource_DECISION_SOURCE_TENANT_CONFIG || now.GetRoutingKeyUsed() != "moverdoc-10" ||
		!strings.HasPrefix(now.GetTopic(), "global-burst-p") {
		t.Fatalf("the next job routed %+v", now)
	}
}
