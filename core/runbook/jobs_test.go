package runbook

import (
	"regexp"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/core/workflow"
)

// Every generated workflow parses as a workflow whose task runs the step's
// function on its worker pool with the params as its whole payload.
func TestGeneratedWorkflowsParse(t *testing.T) {
	t.Parallel()
	idPattern := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	tests := []Step{
		{Name: "a", WorkerID: "exchange", Function: "start_mailbox_move"},
		{Name: "b", WorkerID: "mail-er", Function: "send.email", TimeoutSeconds: 90},
		{Name: "c", WorkerID: "exchange", Function: "start_mailbox_move", IsPollStep: true, PollIntervalSec: 60, PollTimeoutSec: 86400},
		{Name: "d", WorkerID: strings.Repeat("w", 60), Function: strings.Repeat("F", 64), TimeoutSeconds: 3600, IsPollStep: true, PollTimeoutSec: 7},
		{Name: "e", WorkerID: "mail-er", Function: "send_email", TimeoutSeconds: 90}, // reads like b's
		{Name: "f", WorkerID: "mail", Function: "er_send.email", TimeoutSeconds: 90}, // RB_mail_er_send_email... too
	}
	seen := map[string]bool{}
	for _, s := range tests {
		id, src := Workflow(s)
		if !idPattern.MatchString(id) || seen[id] {
			t.Fatalf("id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
		catalog := workflow.NewCatalog()
		if err := catalog.Add(Handler(s)); err != nil {
			t.Fatal(err)
		}
		def, err := workflow.Parse(id+".yaml", src, catalog)
		if err != nil {
			t.Fatalf("%s:\n%s\n%v", id, src, err)
		}
		node, ok := def.Node("run")
		if !ok || node.Task.Handler != s.Function || node.Task.Service != s.WorkerID || node.Task.ParamsFrom == nil {
			t.Fatalf("%s: task %+v", id, node.Task)
		}
		if s.IsPollStep && def.SLA.Seconds() != float64(s.PollTimeoutSec+3600) {
			t.Fatalf("%s: SLA %s", id, def.SLA)
		}
		acts := workflow.Evaluate(def, workflow.State{Inputs: map[string]any{"params": map[string]any{"mailbox": "a@b.c"}}})
		if len(acts) < 2 || acts[1].Params["mailbox"] != "a@b.c" {
			t.Fatalf("%s: actions %+v", id, acts)
		}
	}
	if JobID(TableSteps, 7) == JobID(TableInit, 7) || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(JobID(TableSteps, 7)) {
		t.Fatal("job ids of step and init executions must differ and be 64 hex digits")
	}
}
