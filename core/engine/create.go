package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Created reports what CreateJob did.
type Created struct {
	// New is false when the job existed already (a redelivered queue message).
	New bool
	Job *ledger.Job
}

// CreateJob turns a queued request into a job owned by owner: it writes the job
// (pinned to the workflow version the request was accepted with) and a step per
// workflow node, and starts what the workflow starts with, in one transaction.
// A redelivered message finds the job and changes nothing. A request cancelled
// before any orchestrator claimed it becomes a CANCELLED job at once.
// q stays a contract type: it is the bus message the engine consumes, not an RPC's request.
func (e *Engine) CreateJob(ctx context.Context, q *luciusv1.QueuedJob, owner string) (Created, error) {
	var out Created
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		req, cancelledAt, err := tx.LockRequest(ctx, q.GetJobId())
		if err != nil {
			return err
		}
		job := &ledger.Job{
			JobID: req.JobID, TenantID: req.TenantID, RequestType: req.RequestType,
			WorkflowID: req.RequestType, WorkflowVersion: req.WorkflowVersion, Status: ledger.JobQueued,
			Routing: req.Routing, InputRef: req.InputRef, OutputRef: req.OutputRef, DocID: req.DocID,
			CorrelationID: req.CorrelationID, CallbackURL: req.CallbackURL, OwnerID: owner, OwnerEpoch: 1,
			ReplayOf: req.ReplayOf, Notify: req.Notify, ReceivedAt: req.ReceivedAt,
		}
		cmd := q.GetCommand()
		if cmd == nil { // left out of a message too large for the bus
			if cmd, err = storedCommand(req); err != nil {
				return err
			}
		}
		job.Priority = bus.ClampPriority(int(cmd.GetPriority()))
		def, inputs, problem := e.prepare(ctx, job, cmd.GetPayload().AsMap())
		sla := e.cfg.DefaultSLA
		if def != nil && def.SLA > 0 {
			sla = def.SLA
		}
		job.DeadlineAt = now.Add(sla)
		if job.Payload, err = json.Marshal(inputs); err != nil {
			return err
		}
		inserted, err := tx.InsertJob(ctx, job)
		if err != nil || !inserted {
			return err
		}
		out = Created{New: true, Job: job}
		tx.Append(ledger.Event{JobID: job.JobID, Type: ledger.EventJobCreated, ToStatus: string(ledger.JobQueued),
			Data: map[string]any{"owner_id": owner, "owner_epoch": 1, "workflow_id": job.WorkflowID,
				"workflow_version": job.WorkflowVersion}})
		if problem != "" {
			// Configuration drift between gateway and orchestrator: fail with a
			// reason rather than lose the job.
			return finish(ctx, tx, job, nil, ledger.JobFailedFinal, "CANNOT_START", problem, now)
		}
		steps, err := e.initialSteps(ctx, tx, job, def)
		if err != nil {
			return err
		}
		if err := tx.InsertSteps(ctx, steps); err != nil {
			return err
		}
		r := &run{e: e, tx: tx, job: job, def: def, nodes: map[string]*ledger.Step{}, inputs: inputs, now: now,
			children: map[string][]ledger.ChildResult{}}
		for i := range steps {
			if steps[i].Kind != ledger.KindChild {
				r.nodes[steps[i].NodeID] = &steps[i]
			}
		}
		if !cancelledAt.IsZero() {
			job.CancelRequestedAt = cancelledAt
			return finish(ctx, tx, job, r.nodes, ledger.JobCancelled, "CANCELLED_BEFORE_START", "cancelled before start", now)
		}
		return r.advance(ctx)
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return Created{}, fmt.Errorf("job %s: queued message has no request row: %w", q.GetJobId(), err)
	}
	return out, err
}

// prepare finds the job's workflow version and binds its inputs; problem says
// why the job cannot start.
func (e *Engine) prepare(ctx context.Context, job *ledger.Job, payload map[string]any) (*workflow.Definition, map[string]any, string) {
	def, err := e.cfg.Definitions.Get(ctx, job.WorkflowID, job.WorkflowVersion)
	if err != nil {
		return nil, payload, fmt.Sprintf("%s: workflow %s@%d: %v", ErrUnknownWorkflow, job.WorkflowID, job.WorkflowVersion, err)
	}
	inputs, violations := def.Bind(payload)
	if len(violations) > 0 {
		return nil, payload, fmt.Sprintf("inputs do not fit workflow %s: %s %s", def.Key(), violations[0].Field, violations[0].Description)
	}
	return def, inputs, ""
}

// initialSteps are a new job's steps: one per workflow node, or, for a
// replay, the failed job's steps with what succeeded carried over (outputs,
// artifacts, branch decisions, fan-out children) and everything else pending
// again; attempt numbers continue, so each failed step runs with a new attempt.
func (e *Engine) initialSteps(ctx context.Context, tx *ledger.Tx, job *ledger.Job, def *workflow.Definition) ([]ledger.Step, error) {
	if job.ReplayOf == "" {
		steps := make([]ledger.Step, len(def.Nodes))
		for i, n := range def.Nodes {
			steps[i] = ledger.Step{JobID: job.JobID, StepID: n.ID, NodeID: n.ID, Kind: n.Type, Index: i,
				Type: strings.ToUpper(n.Type), Status: ledger.StepPending}
			if n.Task != nil {
				steps[i].Type, steps[i].Service = n.Task.Handler, n.Task.Service
				steps[i].MaxAttempts, steps[i].AckTimeout = n.Task.Retry.MaxAttempts, n.Task.AckTimeout
			}
		}
		return steps, nil
	}
	old, err := tx.AllSteps(ctx, job.ReplayOf)
	if err != nil {
		return nil, err
	}
	if len(old) == 0 {
		return nil, fmt.Errorf("replay of %s: the job has no steps", job.ReplayOf)
	}
	counts := map[string]*ledger.Children{}
	steps := make([]ledger.Step, len(old))
	for i, s := range old {
		s.JobID, s.LeaseID = job.JobID, ""
		s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}
		kept := s.Status == ledger.StepSucceeded || s.Status == ledger.StepSkipped
		if !kept {
			s.RetryBase = s.AttemptNo // the replay's attempts get the full retry budget
			s.Status, s.Output, s.Artifacts, s.FailureClass, s.Reason = ledger.StepPending, nil, nil, "", ""
			s.StartedAt, s.CompletedAt = time.Time{}, time.Time{}
		}
		if s.Kind == ledger.KindFanOut && s.Expanded {
			s.Children = ledger.Children{Total: s.Children.Total}
			counts[s.StepID] = &s.Children
			if !kept {
				s.Status = ledger.StepPending
			}
		}
		steps[i] = s
	}
	for i := range steps {
		if c := counts[steps[i].Parent]; c != nil {
			if steps[i].Status == ledger.StepSucceeded {
				c.Succeeded++
			} else {
				c.Pending++
			}
		}
	}
	// counts points into steps' copies made above; write them back.
	for i := range steps {
		if c := counts[steps[i].StepID]; c != nil {
			steps[i].Children = *c
		}
	}
	return steps, nil
}
