package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lucius-platform/lucius/core/workflow"
)

// workflowID is the request type every chaos job runs.
const workflowID = "CHAOS_3STEP"

// workflowYAML is the chaos workflow: OCR → EMBEDDING → SIS, each passing the
// job's fault input to its worker. A job without a fault renders the param to
// null, which is left out of the directive. Short ACK and execution timeouts
// and a fixed 1s backoff keep recovery and retries quick; six attempts leave
// room for attempts burnt by kills on top of an injected retryable fault.
const workflowYAML = `workflow_id: CHAOS_3STEP
version: 1
description: Three steps for the chaos run; each passes the job's fault input to its worker.
inputs:
  fault: {type: object}
nodes:
  START: {type: start, next: ocr}
  ocr:
    type: task
    handler: OCR
    ack_timeout_seconds: 5
    timeout_seconds: 10
    retry: {max_attempts: 6, backoff: fixed, initial_delay_seconds: 1}
    params: {fault: "{{ inputs.fault }}"}
    next: embedding
  embedding:
    type: task
    handler: EMBEDDING
    ack_timeout_seconds: 5
    timeout_seconds: 10
    retry: {max_attempts: 6, backoff: fixed, initial_delay_seconds: 1}
    params: {fault: "{{ inputs.fault }}"}
    next: sis
  sis:
    type: task
    handler: SIS
    ack_timeout_seconds: 5
    timeout_seconds: 10
    retry: {max_attempts: 6, backoff: fixed, initial_delay_seconds: 1}
    params: {fault: "{{ inputs.fault }}"}
    next: END
  END: {type: end}
`

// Fault kinds, as the worker skeleton reads them from a directive's payload
// (sdk/worker/workertest/faults).
const (
	FaultPermanent = "permanent"
	FaultRetryable = "retryable"
	FaultSleep     = "sleep"
)

// Final job statuses, as the ledger spells them.
const (
	statusSucceeded   = "SUCCEEDED"
	statusFailedFinal = "FAILED_FINAL"
	statusCancelled   = "CANCELLED"
)

// Fault is what one job asks the worker of one of its steps to do.
type Fault struct {
	// Step is the workflow node (and step id), e.g. "embedding".
	Step string
	// Handler is the step type the worker matches, e.g. "EMBEDDING".
	Handler string
	Kind    string
	// Attempts is how many attempts a retryable fault fails.
	Attempts int
	// Sleep is how long a sleep fault delays each attempt.
	Sleep time.Duration
}

// payload is the fault object the worker reads.
func (f *Fault) payload() map[string]any {
	p := map[string]any{"step_type": f.Handler, "kind": f.Kind}
	switch f.Kind {
	case FaultRetryable:
		p["attempts"] = f.Attempts
	case FaultSleep:
		p["ms"] = f.Sleep.Milliseconds()
	}
	return p
}

// String names the fault for reports, e.g. "retryable×2@embedding".
func (f *Fault) String() string {
	switch f.Kind {
	case FaultRetryable:
		return fmt.Sprintf("%s×%d@%s", f.Kind, f.Attempts, f.Step)
	case FaultSleep:
		return fmt.Sprintf("%s %s@%s", f.Kind, f.Sleep, f.Step)
	}
	return f.Kind + "@" + f.Step
}

// taskStep is one task node of the chaos workflow.
type taskStep struct {
	ID, Handler string
	MaxAttempts int
}

// shape is what the checker needs to know about the workflow, read from its
// parsed definition so the expectations cannot drift from the YAML.
type shape struct {
	steps []taskStep
}

// loadShape parses the chaos workflow against the built-in handler catalog,
// as the gateway and orchestrators will.
func loadShape() (shape, error) {
	catalog := workflow.NewCatalog()
	if _, err := workflow.LoadDir(workflow.BuiltinFiles(), catalog); err != nil {
		return shape{}, fmt.Errorf("built-in workflows: %w", err)
	}
	def, err := workflow.Parse(workflowID+".yaml", []byte(workflowYAML), catalog)
	if err != nil {
		return shape{}, fmt.Errorf("chaos workflow: %w", err)
	}
	var sh shape
	for _, n := range def.Nodes {
		if n.Type == workflow.TypeTask {
			sh.steps = append(sh.steps, taskStep{ID: n.ID, Handler: n.Task.Handler, MaxAttempts: n.Task.Retry.MaxAttempts})
		}
	}
	return sh, nil
}

func (sh shape) step(id string) (taskStep, bool) {
	for _, s := range sh.steps {
		if s.ID == id {
			return s, true
		}
	}
	return taskStep{}, false
}

// expected is the final status a job with fault f (nil: none) must reach:
// FAILED_FINAL when the fault makes its step fail on every attempt it may
// have, SUCCEEDED otherwise, whatever the chaos did.
func (sh shape) expected(f *Fault) string {
	if f == nil {
		return statusSucceeded
	}
	switch f.Kind {
	case FaultPermanent:
		return statusFailedFinal
	case FaultRetryable:
		if s, ok := sh.step(f.Step); ok && f.Attempts >= s.MaxAttempts {
			return statusFailedFinal
		}
	}
	return statusSucceeded
}

// faultMix weighs the faults drawn for a faulted job.
var faultMix = []struct {
	weight int
	draw   func(rng *rand.Rand, s taskStep) *Fault
}{
	{3, func(_ *rand.Rand, s taskStep) *Fault { return &Fault{Kind: FaultPermanent} }},
	// Fails one or two attempts, then succeeds.
	{3, func(rng *rand.Rand, s taskStep) *Fault {
		return &Fault{Kind: FaultRetryable, Attempts: 1 + rng.IntN(max(1, min(2, s.MaxAttempts-1)))}
	}},
	// Fails every attempt the step may have.
	{1, func(_ *rand.Rand, s taskStep) *Fault { return &Fault{Kind: FaultRetryable, Attempts: s.MaxAttempts} }},
	// Slow, but within the step's timeout: heartbeats keep the lease.
	{3, func(rng *rand.Rand, s taskStep) *Fault {
		return &Fault{Kind: FaultSleep, Sleep: time.Duration(500+rng.IntN(2501)) * time.Millisecond}
	}},
}

// planFaults draws each of n jobs' fault (nil: none): a fraction rate of the
// jobs get one, on a random step.
func planFaults(rng *rand.Rand, n int, rate float64, sh shape) []*Fault {
	total := 0
	for _, m := range faultMix {
		total += m.weight
	}
	faults := make([]*Fault, n)
	for i := range faults {
		if rng.Float64() >= rate {
			continue
		}
		s := sh.steps[rng.IntN(len(sh.steps))]
		pick := rng.IntN(total)
		for _, m := range faultMix {
			if pick < m.weight {
				faults[i] = m.draw(rng, s)
				break
			}
			pick -= m.weight
		}
		faults[i].Step, faults[i].Handler = s.ID, s.Handler
	}
	return faults
}
