package runbook

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/lucius-platform/lucius/core/workflow"
)

// Each dispatch of a runbook step runs as a Lucius job: the same engine,
// attempts, leases and callbacks as every other job. The job runs a
// generated workflow of one task: the step's function (a handler) on its
// worker pool (a service), whose directive payload is exactly the step's
// resolved params. The gateway registers these workflows (and the handlers)
// when a runbook is applied; the executor submits jobs to them.

// Tables whose rows become jobs, as named in job ids and poll-check ids.
const (
	TableSteps = "step"
	TableInit  = "init"
)

// JobID is the job id of an execution row's dispatch: derived, so a
// repeated dispatch (a redelivered event) finds the job it made before.
func JobID(table string, id int64) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("lucius/runbook/v1\n%s\n%d", table, id)))
	return hex.EncodeToString(sum[:])
}

// Tenant is the Lucius tenant a runbook's jobs run under.
func Tenant(runbookName string) string { return "runbook:" + runbookName }

// Handler is the catalog entry a step's function needs: the function is a
// handler owned by the step's worker pool.
func Handler(s Step) workflow.HandlerInfo {
	return workflow.HandlerInfo{Name: s.Function, Service: s.WorkerID,
		Description: "runbook function on worker pool " + s.WorkerID}
}

// Workflow returns the id and YAML of the generated workflow a step's
// dispatches run. Steps with the same worker pool, function, timeout and
// poll settings share one. The id fits the request type pattern (^[A-Za-z][A-Za-z0-9_]{0,63}$).
func Workflow(s Step) (id string, source []byte) {
	id = workflowID(s)
	var b strings.Builder
	fmt.Fprintf(&b, "workflow_id: %s\nversion: 1\n", id)
	fmt.Fprintf(&b, "description: Runbook step running %s on worker pool %s (generated).\n", s.Function, s.WorkerID)
	if s.IsPollStep {
		// A poll step's job lives while it is polled; the executor ends it at
		// its poll timeout. The SLA is a backstop beyond that.
		fmt.Fprintf(&b, "sla_seconds: %d\n", s.PollTimeoutSec+3600)
	}
	b.WriteString("inputs:\n  params: {type: object, required: true}\n")
	b.WriteString("nodes:\n  START: {type: start, next: run}\n  run:\n    type: task\n")
	fmt.Fprintf(&b, "    handler: %q\n    service: %q\n", s.Function, s.WorkerID)
	b.WriteString("    params: \"{{ inputs.params }}\"\n")
	if s.TimeoutSeconds > 0 {
		fmt.Fprintf(&b, "    timeout_seconds: %d\n", s.TimeoutSeconds)
	}
	b.WriteString("    next: END\n  END: {type: end}\n")
	return id, []byte(b.String())
}

// workflowID names a step's generated workflow: readable (the pool and the
// function), and exact: a hash of the settings that shape it keeps two steps
// whose names read alike (send.email, send_email) apart.
func workflowID(s Step) string {
	settings := fmt.Sprintf("%s\x00%s\x00%d\x00%t\x00%d", s.WorkerID, s.Function, s.TimeoutSeconds, s.IsPollStep, s.PollTimeoutSec)
	sum := sha256.Sum256([]byte(settings))
	suffix := "_" + hex.EncodeToString(sum[:4])
	id := "RB_" + idPart(s.WorkerID) + "_" + idPart(s.Function)
	if len(id)+len(suffix) > 64 {
		id = id[:64-len(suffix)]
	}
	return id + suffix
}

// idPart keeps the characters a workflow id allows.
func idPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
