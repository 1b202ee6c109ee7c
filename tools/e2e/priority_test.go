package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A priority-9 job submitted after five priority-0 jobs is the first one a
// worker of the service receives: its directive overtakes theirs while they
// wait. (The head-start rule that keeps priority 0 from starving is proved
// by the outbox's and the PostgreSQL bus's own tests.)
func TestHigherPriorityIsDispatchedFirst(t *testing.T) {
	if e2eBus == "servicebus" {
		t.Skip("Service Bus has no message priority: there priority orders only the ledger's outbox (README: Priority)")
	}
	s := startSuite(t, suiteOptions{})
	n := 0
	submit := func(priority int32) string {
		t.Helper()
		n++ // a different input each: the same command with another priority is the same job
		out, _ := s.output(fmt.Sprintf("priority-%d.json", n))
		resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
			RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: s.input(fmt.Sprintf("priority-%d.txt", n), sampleText), OutputRef: out,
			Payload: &structpb.Struct{}, Priority: priority}})
		if err != nil {
			t.Fatalf("submit priority %d: %v", priority, err)
		}
		return resp.GetJobId()
	}
	var jobs []string
	for range 5 {
		jobs = append(jobs, submit(0))
	}
	urgent := submit(9)
	if got, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: urgent}); err != nil || got.GetJob().GetPriority() != 9 {
		t.Fatalf("the job's view: %v %v, want priority 9", got.GetJob().GetPriority(), err)
	}
	for _, id := range append(jobs, urgent) {
		s.waitStep(id, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK)
	}
	// No worker serves MANUAL: the six directives wait in its subscription.
	var path string
	if err := s.pool.QueryRow(s.ctx, `SELECT path FROM bus_messages WHERE message_id = 'directive/' || $1 || '/manual/1'`,
		urgent).Scan(&path); err != nil {
		t.Fatal(err)
	}
	topic, sub, ok := strings.Cut(path, "/subscriptions/")
	if !ok {
		t.Fatalf("directive path %q is not a subscription", path)
	}
	b, err := s.OpenBus(s.ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(s.ctx) //nolint:errcheck
	r, err := b.NewReceiver(s.ctx, bus.SubscriptionSource(topic, sub))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(s.ctx) //nolint:errcheck
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	got, err := r.Receive(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v (%d)", err, len(got))
	}
	if want := "directive/" + urgent + "/manual/1"; got[0].ID != want {
		t.Fatalf("first directive received is %s, want the priority-9 job's %s", got[0].ID, want)
	}
}
