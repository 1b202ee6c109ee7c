package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// bigPrompts is a SIS command's input of about 250 KB: more than a Service
// Bus Standard message carries.
func bigPrompts() map[string]any {
	prompts := make([]any, 100)
	for i := range prompts {
		prompts[i] = strings.Repeat(string(rune('a'+i%26)), 2500)
	}
	return map[string]any{"prompt_set": prompts}
}

// directiveOf returns the job's one directive message in the outbox.
func (f *fixture) directiveOf(jobID string) (ledger.OutboxMessage, *luciusv1.Directive) {
	f.t.Helper()
	for _, m := range f.outbox(jobID) {
		if m.Kind == ledger.KindDirective {
			d := &luciusv1.Directive{}
			if err := protojson.Unmarshal(m.Body, d); err != nil {
				f.t.Fatal(err)
			}
			return m, d
		}
	}
	f.t.Fatalf("job %s has no directive in the outbox", jobID)
	return ledger.OutboxMessage{}, nil
}

// A command and a directive too large for a bus message travel without what
// makes them large: the queue message leaves the command to the request row,
// the directive message carries the directive detached, and the ledger keeps
// the whole directive for the holder of the attempt's lease.
func TestOversizedMessagesTravelDetached(t *testing.T) {
	f := setup(t)
	q, req, _, err := f.request("Acme", "SIS", bigPrompts(), "")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := engine.QueuedJobMessage(f.ctx, req, q.GetCommand())
	if err != nil {
		t.Fatal(err)
	}
	queued := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(msg.Body, queued); err != nil {
		t.Fatal(err)
	}
	if len(msg.Body) > engine.MaxInlineMessageBytes || queued.GetCommand() != nil || queued.GetJobId() != q.GetJobId() {
		t.Fatalf("queue message of %d bytes, command kept: %t", len(msg.Body), queued.GetCommand() != nil)
	}
	if _, err := f.store.Accept(f.ctx, req, msg, ledger.Limits{}); err != nil {
		t.Fatal(err)
	}
	job := f.create(queued)

	out, stub := f.directiveOf(job.JobID)
	if len(out.Body) > engine.MaxInlineMessageBytes || !stub.GetDetached() || stub.GetPayload() != nil {
		t.Fatalf("directive message of %d bytes, detached %t, payload kept %t", len(out.Body), stub.GetDetached(), stub.GetPayload() != nil)
	}
	if stub.GetCallbackToken() == "" || stub.GetLeaseId() == "" || stub.GetService() == "" {
		t.Fatalf("the detached message lacks what fetching needs: %v", stub)
	}
	whole, err := f.eng.DetachedDirective(f.ctx, stub.GetJobId(), stub.GetStepId(), int(stub.GetAttemptNo()), stub.GetLeaseId())
	if err != nil {
		t.Fatal(err)
	}
	prompts := whole.GetPayload().GetFields()["prompt_set"].GetListValue().GetValues()
	if whole.GetDetached() || len(prompts) != 100 || prompts[99].GetStringValue() != strings.Repeat("v", 2500) {
		t.Fatalf("whole directive: detached %t, %d prompts", whole.GetDetached(), len(prompts))
	}
	if whole.GetCallbackToken() != stub.GetCallbackToken() || whole.GetLeaseId() != stub.GetLeaseId() {
		t.Fatal("the whole directive is not the message's attempt")
	}
	if _, err := f.eng.DetachedDirective(f.ctx, stub.GetJobId(), stub.GetStepId(), int(stub.GetAttemptNo()), uuid.NewString()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("another lease fetched the directive: %v", err)
	}

	small := f.create(f.accept("SIS"))
	if _, d := f.directiveOf(small.JobID); d.GetDetached() || d.GetPayload() == nil {
		t.Fatalf("a small directive was detached: %v", d)
	} else if _, err := f.eng.DetachedDirective(f.ctx, d.GetJobId(), d.GetStepId(), int(d.GetAttemptNo()), d.GetLeaseId()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a directive sent whole has a detached copy: %v", err)
	}
}
