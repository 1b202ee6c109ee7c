package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// run is one job inside one ledger transaction: its definition, the steps of
// its workflow nodes and its inputs, loaded under the job's row lock.
type run struct {
	e      *Engine
	tx     *ledger.Tx
	job    *ledger.Job
	def    *workflow.Definition
	nodes  map[string]*ledger.Step // by node id
	inputs map[string]any
	now    time.Time
	// children caches fan-out children's results for this transaction.
	children map[string][]ledger.ChildResult
	// released is the step ReleaseHold dispatches, and the hold it skips.
	released struct{ step, kind string }
}

// open loads the job's definition and node steps. The job must be locked.
func (e *Engine) open(ctx context.Context, tx *ledger.Tx, job *ledger.Job, now time.Time) (*run, error) {
	def, err := e.cfg.Definitions.Get(ctx, job.WorkflowID, job.WorkflowVersion)
	if err != nil {
		return nil, fmt.Errorf("job %s: workflow %s@%d: %w", job.JobID, job.WorkflowID, job.WorkflowVersion, err)
	}
	steps, err := tx.NodeSteps(ctx, job.JobID)
	if err != nil {
		return nil, err
	}
	r := &run{e: e, tx: tx, job: job, def: def, nodes: map[string]*ledger.Step{}, now: now, children: map[string][]ledger.ChildResult{}}
	for i := range steps {
		r.nodes[steps[i].NodeID] = &steps[i]
	}
	if err := json.Unmarshal(orEmptyObject(job.Payload), &r.inputs); err != nil {
		return nil, fmt.Errorf("job %s inputs: %w", job.JobID, err)
	}
	return r, nil
}

// advance evaluates the job and applies what the evaluator decided.
func (r *run) advance(ctx context.Context) error {
	if r.job.Status.Terminal() {
		return nil
	}
	st, err := r.state(ctx)
	if err != nil {
		return err
	}
	for _, a := range workflow.Evaluate(r.def, st) {
		if err := r.apply(ctx, a); err != nil {
			if le, ok := errors.AsType[*workflow.LimitError](err); ok {
				// The job asked for more than the limits allow: it fails,
				// and nothing after the refused action is applied.
				return finish(ctx, r.tx, r.job, r.nodes, ledger.JobFailedFinal, "STEP_FAILED", le.Error(), r.now)
			}
			return err
		}
	}
	return r.tx.UpdateJob(ctx, r.job)
}

// state builds the evaluator's view of the job.
func (r *run) state(ctx context.Context) (workflow.State, error) {
	st := workflow.State{Inputs: r.inputs, Nodes: map[string]*workflow.NodeState{}, Cancelling: r.job.Status == ledger.JobCancelling}
	for id, s := range r.nodes {
		ns := &workflow.NodeState{Status: workflow.Status(s.Status), Expanded: s.Expanded}
		if len(s.Output) > 0 {
			if err := json.Unmarshal(s.Output, &ns.Output); err != nil {
				return st, fmt.Errorf("step %s output: %w", s.StepID, err)
			}
		}
		if s.Kind == ledger.KindFanOut {
			c := s.Children
			ns.Children = workflow.Children{Total: c.Total, Pending: c.Pending, Running: c.Running, Succeeded: c.Succeeded, Failed: c.Failed}
			if s.Expanded && c.Total > 0 && c.Succeeded == c.Total && !s.Status.Terminal() {
				results, err := r.childResults(ctx, s)
				if err != nil {
					return st, err
				}
				for _, res := range results {
					var out any
					if len(res.Output) > 0 {
						if err := json.Unmarshal(res.Output, &out); err != nil {
							return st, err
						}
					}
					ns.Children.Outputs = append(ns.Children.Outputs, out)
				}
			}
		}
		st.Nodes[id] = ns
	}
	return st, nil
}

func (r *run) childResults(ctx context.Context, parent *ledger.Step) ([]ledger.ChildResult, error) {
	if res, ok := r.children[parent.StepID]; ok {
		return res, nil
	}
	res, err := r.tx.ChildResults(ctx, r.job.JobID, parent.StepID)
	if err != nil {
		return nil, err
	}
	r.children[parent.StepID] = res
	return res, nil
}

// output is a node's output for templates (nil when it did not succeed).
func (r *run) output(id string) (any, bool) {
	s, ok := r.nodes[id]
	if !ok || s.Status != ledger.StepSucceeded || len(s.Output) == 0 {
		return nil, false
	}
	var v any
	if json.Unmarshal(s.Output, &v) != nil {
		return nil, false
	}
	return v, true
}

func (r *run) apply(ctx context.Context, a workflow.Action) error {
	switch a.Kind {
	case workflow.ActResolve:
		return r.resolve(ctx, a)
	case workflow.ActDispatch:
		s := r.nodes[a.Node]
		params, err := json.Marshal(a.Params)
		if err != nil {
			return err
		}
		s.Params = params
		return r.newAttempt(ctx, s, time.Time{}, "STEP_DISPATCHED")
	case workflow.ActExpand:
		return r.expand(ctx, a)
	case workflow.ActDispatchChildren:
		parent := r.nodes[a.Node]
		kids, err := r.tx.PendingChildren(ctx, r.job.JobID, parent.StepID, a.Count)
		if err != nil {
			return err
		}
		for i := range kids {
			if err := r.newAttempt(ctx, &kids[i], time.Time{}, "STEP_DISPATCHED"); err != nil {
				return err
			}
		}
		parent.Children.Pending -= len(kids)
		parent.Children.Running += len(kids)
		return r.tx.UpdateStep(ctx, parent)
	case workflow.ActFail:
		return finish(ctx, r.tx, r.job, r.nodes, ledger.JobFailedFinal, "STEP_FAILED", a.Reason, r.now)
	case workflow.ActComplete:
		if a.Status == workflow.Succeeded {
			r.job.ResultRef = r.job.OutputRef
			return finish(ctx, r.tx, r.job, r.nodes, ledger.JobSucceeded, "ALL_STEPS_SUCCEEDED", "", r.now)
		}
		return finish(ctx, r.tx, r.job, r.nodes, ledger.JobFailedFinal, "FAILURE_HANDLED", a.Reason, r.now)
	case workflow.ActCancelled:
		return finish(ctx, r.tx, r.job, r.nodes, ledger.JobCancelled, "CANCELLED_AFTER_IN_FLIGHT", r.job.Reason, r.now)
	}
	return fmt.Errorf("unknown action %d", a.Kind)
}

func (r *run) resolve(ctx context.Context, a workflow.Action) error {
	s := r.nodes[a.Node]
	if a.Output != nil {
		out, err := json.Marshal(a.Output)
		if err != nil {
			return err
		}
		s.Output = out
	}
	reason := strings.ToUpper(s.Kind) + "_" + string(a.Status)
	if a.Status == workflow.Skipped {
		reason = "BRANCH_NOT_TAKEN"
	}
	setStepStatus(r.tx, s, ledger.StepStatus(a.Status), reason, r.now)
	if s.Kind == ledger.KindConditional && a.Status == workflow.Succeeded {
		out, _ := a.Output.(map[string]any)
		r.tx.Append(ledger.Event{JobID: r.job.JobID, StepID: s.StepID, Type: ledger.EventBranchTaken,
			Data: map[string]any{"branch": out["branch"], "value": out["value"]}})
	}
	return r.tx.UpdateStep(ctx, s)
}

// expand creates a fan-out's children with their params rendered. The
// children's params together may not pass the workflow's MaxExpansionBytes
// (a template such as {{ inputs.items }} repeats per child): rendering stops
// there, the fan-out fails and a *workflow.LimitError says why.
func (r *run) expand(ctx context.Context, a workflow.Action) error {
	parent := r.nodes[a.Node]
	node, _ := r.def.Node(a.Node)
	kids := make([]ledger.Step, len(a.Items))
	limit, rendered := r.def.Limits().MaxExpansionBytes, 0
	for i, item := range a.Items {
		params, err := json.Marshal(r.def.ChildParams(a.Node, r.inputs, r.output, item, i))
		if err != nil {
			return err
		}
		if rendered += len(params); rendered > limit {
			setStepStatus(r.tx, parent, ledger.StepFailedFinal, "MAX_EXPANSION_BYTES", r.now)
			if err := r.tx.UpdateStep(ctx, parent); err != nil {
				return err
			}
			return &workflow.LimitError{Limit: "max_expansion_bytes", Max: limit, Value: rendered, Where: "fan_out " + a.Node,
				Msg: fmt.Sprintf("the params of its first %d of %d children render to %d bytes, more than the limit of %d (max_expansion_bytes)",
					i+1, len(a.Items), rendered, limit)}
		}
		kids[i] = ledger.Step{JobID: r.job.JobID, StepID: workflow.ChildStepID(a.Node, i), NodeID: a.Node,
			Kind: ledger.KindChild, Parent: parent.StepID, ChildNo: i, Index: parent.Index, Type: node.Task.Handler,
			Service: node.Task.Service, Status: ledger.StepPending, MaxAttempts: node.Task.Retry.MaxAttempts,
			AckTimeout: node.Task.AckTimeout, Params: params}
	}
	if len(kids) > 0 {
		if err := r.tx.InsertSteps(ctx, kids); err != nil {
			return err
		}
	}
	parent.Expanded = true
	parent.Children = ledger.Children{Total: len(kids), Pending: len(kids)}
	setStepStatus(r.tx, parent, ledger.StepInProgress, "FAN_OUT_EXPANDED", r.now)
	r.tx.Append(ledger.Event{JobID: r.job.JobID, StepID: parent.StepID, Type: ledger.EventFanOutExpanded,
		Data: map[string]any{"children": len(kids), "max_parallel": node.MaxParallel}})
	return r.tx.UpdateStep(ctx, parent)
}

// finish ends a job: it closes what never started, records the outcome and,
// when the job has a callback_url, enqueues the completion callback. What is
// still running may finish; its results are recorded, never applied to the job.
func finish(ctx context.Context, tx *ledger.Tx, job *ledger.Job, nodes map[string]*ledger.Step,
	status ledger.JobStatus, code, reason string, now time.Time) error {
	if status != ledger.JobSucceeded {
		if err := cancelWaiting(ctx, tx, job.JobID, nodes, "JOB_"+string(status)); err != nil {
			return err
		}
	}
	cancelled, err := tx.CancelPending(ctx, job.JobID, "JOB_"+string(status))
	if err != nil {
		return err
	}
	children := 0
	for _, c := range cancelled {
		if c.Parent != "" { // fan-out children are counted in one event
			children++
			continue
		}
		tx.Append(ledger.Event{JobID: job.JobID, StepID: c.StepID, Type: ledger.EventStepStatusChanged,
			FromStatus: string(ledger.StepPending), ToStatus: string(ledger.StepCancelled), Reason: "JOB_" + string(status)})
	}
	if children > 0 {
		tx.Append(ledger.Event{JobID: job.JobID, Type: ledger.EventStepsCancelled, Reason: "JOB_" + string(status),
			Data: map[string]any{"children": children}})
	}
	for _, s := range nodes {
		if s.Kind == ledger.KindFanOut && s.Children.Pending > 0 {
			s.Children.Pending = 0 // cancelled above
			closeFanOut(tx, s, now)
			if err := tx.UpdateStep(ctx, s); err != nil {
				return err
			}
		}
	}
	if job.Reason == "" && status != ledger.JobSucceeded {
		job.Reason = reason // keep a more specific reason already recorded (the failing step's)
	}
	setJobStatus(tx, job, status, code, now)
	hash := ""
	if status == ledger.JobSucceeded {
		hash = contentHash(lastTask(nodes))
	}
	if err := tx.FinishRevision(ctx, job.JobID, status, hash); err != nil { // the job's asset revision, if any
		return err
	}
	if job.Notify != "" {
		msg, err := jobUpdate(job, lastTask(nodes), now)
		if err != nil {
			return err
		}
		tx.Enqueue(msg)
	}
	if job.CallbackURL != "" {
		msg, err := completionMessage(job, now)
		if err != nil {
			return err
		}
		tx.Enqueue(msg)
	}
	return tx.UpdateJob(ctx, job)
}

// closeFanOut gives a fan-out of an ended job its final state once none of
// its children runs any more.
func closeFanOut(tx *ledger.Tx, s *ledger.Step, now time.Time) {
	if s.Status.Terminal() || s.Children.Running > 0 {
		return
	}
	to := ledger.StepCancelled
	if s.Children.Failed > 0 {
		to = ledger.StepFailedFinal
	}
	setStepStatus(tx, s, to, "JOB_ENDED", now)
}

func orEmptyObject(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("{}")
	}
	return raw
}

// contentHash is the SHA-256 of what a job produced: its final step's
// artifacts (name and SHA-256 each, in order); empty without artifacts.
func contentHash(step *ledger.Step) string {
	if step == nil || len(step.Artifacts) == 0 {
		return ""
	}
	h := sha256.New()
	for _, a := range step.Artifacts {
		fmt.Fprintf(h, "%s\x00%s\n", a.Name, a.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}
