package orchestrator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/pgtest"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// lucius_callbacks_total counts every answered callback by kind and
// outcome, in lower case: the engine's outcomes, and refused for a callback
// whose token was refused.
func TestCallbacksAreCountedByKindAndOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledger.New(pgtest.NewPool(t), nil)
	t.Cleanup(store.Close)
	reg, err := registry.Open(ctx, store, "", workflow.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: reg, WorkspaceRoot: "file:///ws",
		Callbacks: engine.Callbacks{GRPCTarget: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := newCallbackService(eng, testCallbackKeys, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	id := newJob(t, ctx, store, eng, "orch-a")
	steps, err := store.ListSteps(ctx, id, ledger.StepFilter{Kinds: []string{ledger.KindTask}})
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps %v %v", steps, err)
	}
	step := steps[0]
	worker := auth.NewContext(ctx, &auth.Principal{Subject: "w", Roles: []auth.Role{auth.RoleWorker}, Services: []string{step.Service}})
	token := func(lease string) string {
		tok, err := testCallbackKeys.Sign(auth.Attempt{JobID: id, StepID: step.StepID, AttemptNo: step.AttemptNo, LeaseID: lease,
			OwnerEpoch: 1, Service: step.Service}, time.Now(), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ack := func(lease string) {
		t.Helper()
		if _, err := svc.Ack(worker, &luciusv1.AckRequest{JobId: id, StepId: step.StepID, AttemptNo: int32(step.AttemptNo),
			LeaseId: lease, AckTime: timestamppb.Now(), CallbackToken: token(lease)}); err != nil {
			t.Fatal(err)
		}
	}
	result := func(token string) error {
		_, err := svc.Result(worker, &luciusv1.ResultRequest{JobId: id, StepId: step.StepID, AttemptNo: int32(step.AttemptNo),
			LeaseId: step.LeaseID, Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now(), CallbackToken: token})
		return err
	}

	type series struct{ kind, outcome string }
	want := map[series]float64{{"ack", "applied"}: 1, {"ack", "duplicate"}: 1, {"ack", "lease_mismatch"}: 1,
		{"result", "refused"}: 1, {"result", "applied"}: 1}
	value := func(s series) float64 {
		return metrics.Value(t, "lucius_callbacks_total", attribute.String("kind", s.kind), attribute.String("outcome", s.outcome))
	}
	before := map[series]float64{}
	for s := range want {
		before[s] = value(s)
	}
	ack(step.LeaseID)
	ack(step.LeaseID)
	ack("00000000-0000-0000-0000-000000000000")
	if err := result("not a token"); err == nil {
		t.Fatal("a RESULT without a valid token was answered")
	}
	if err := result(token(step.LeaseID)); err != nil {
		t.Fatal(err)
	}
	for s, n := range want {
		if got := value(s) - before[s]; got != n {
			t.Errorf("lucius_callbacks_total{kind=%q,outcome=%q} gained %v, want %v", s.kind, s.outcome, got, n)
		}
	}
}
