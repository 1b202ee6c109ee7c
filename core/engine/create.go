package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Created reports what CreateJob did.
type Created struct {
	// New is false when the job existed already (a redelivered queue message).
	New bool
	Job *ledger.Job
}

// CreateJob turns a queued request into a job owned by owner: it writes the job
// and its steps and dispatches the first step (attempt 1, fresh lease, routing
// pinned from the request) in one transaction. A redelivered message finds the
// job and changes nothing. A request cancelled before any orchestrator claimed it
// becomes a CANCELLED job at once.
func (e *Engine) CreateJob(ctx context.Context, q *luciusv1.QueuedJob, owner string) (Created, error) {
	cmd := q.GetCommand()
	proto, known := e.cfg.Protocols.Lookup(cmd.GetRequestType())
	payload, err := protojson.Marshal(cmd.GetPayload())
	if err != nil {
		return Created{}, fmt.Errorf("job %s: payload: %w", q.GetJobId(), err)
	}
	var out Created
	err = e.store.InTx(ctx, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		req, cancelledAt, err := tx.LockRequest(ctx, q.GetJobId())
		if err != nil {
			return err
		}
		job := &ledger.Job{
			JobID:         req.JobID,
			TenantID:      req.TenantID,
			RequestType:   req.RequestType,
			Status:        ledger.JobQueued,
			Routing:       req.Routing,
			InputRef:      req.InputRef,
			OutputRef:     req.OutputRef,
			DocID:         req.DocID,
			CorrelationID: req.CorrelationID,
			CallbackURL:   req.CallbackURL,
			Payload:       json.RawMessage(payload),
			OwnerID:       owner,
			OwnerEpoch:    1,
		}
		if !known {
			// The gateway accepted a request type this orchestrator does not know
			// (configuration drift). Fail the job with a reason rather than lose it.
			job.Status, job.CompletedAt = ledger.JobFailedFinal, now
			job.Reason = fmt.Sprintf("%s: no protocol for request type %q", ErrUnknownProtocol, req.RequestType)
			inserted, err := tx.InsertJob(ctx, job)
			if err != nil || !inserted {
				out = Created{New: inserted, Job: job}
				return err
			}
			tx.Append(ledger.Event{JobID: job.JobID, Type: ledger.EventJobCreated, ToStatus: string(ledger.JobFailedFinal),
				Reason: "UNKNOWN_PROTOCOL", Data: map[string]any{"owner_id": owner, "request_type": req.RequestType}})
			out = Created{New: true, Job: job}
			return nil
		}
		job.ProtocolID, job.ProtocolVersion = proto.ID, proto.Version
		inserted, err := tx.InsertJob(ctx, job)
		if err != nil {
			return err
		}
		if !inserted {
			out = Created{New: false}
			return nil
		}
		tx.Append(ledger.Event{JobID: job.JobID, Type: ledger.EventJobCreated, ToStatus: string(ledger.JobQueued),
			Data: map[string]any{"owner_id": owner, "owner_epoch": 1, "protocol_id": proto.ID, "protocol_version": proto.Version}})
		steps := make([]ledger.Step, len(proto.Steps))
		for i, ps := range proto.Steps {
			steps[i] = ledger.Step{JobID: job.JobID, StepID: ps.ID, Index: i, Type: ps.Type, Service: ps.Service,
				Status: ledger.StepPending, MaxAttempts: ps.MaxAttempts, AckTimeout: ps.AckTimeout()}
		}
		if err := tx.InsertSteps(ctx, steps); err != nil {
			return err
		}
		if !cancelledAt.IsZero() {
			job.CancelRequestedAt = cancelledAt
			if err := cancelPendingSteps(ctx, tx, steps, "JOB_CANCELLED", now); err != nil {
				return err
			}
			setJobStatus(tx, job, ledger.JobCancelled, "CANCELLED_BEFORE_START", now)
		} else {
			if err := e.dispatch(ctx, tx, job, steps, 0, now); err != nil {
				return err
			}
			setJobStatus(tx, job, ledger.JobDispatching, "FIRST_STEP_DISPATCHED", now)
		}
		if err := tx.UpdateJob(ctx, job); err != nil {
			return err
		}
		out = Created{New: true, Job: job}
		return nil
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return Created{}, fmt.Errorf("job %s: queued message has no request row: %w", q.GetJobId(), err)
	}
	return out, err
}
