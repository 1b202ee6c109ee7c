package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// dispatchExec submits the job that runs an execution row, in tx: a request
// and its orchestrator-jobs message, like a submitted command, with the
// executor's topic to notify. The job runs the step's generated workflow, its
// payload exactly the row's params.
func (x *runbookExecutor) dispatchExec(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, r *runbook.Execution, step runbook.Step, now time.Time) error {
	wfID, source := runbook.Workflow(step)
	def, err := x.workflows.Get(ctx, wfID, 0)
	if err != nil {
		// Applied some other way than through the API: register it now.
		if err := x.workflows.RegisterHandlers(ctx, []workflowHandler{runbook.Handler(step)}); err != nil {
			return err
		}
		if def, _, err = x.workflows.Register(ctx, wfID+".yaml", source, "runbook-executor"); err != nil {
			return fmt.Errorf("generated workflow %s: %w", wfID, err)
		}
	}
	params := &structpb.Struct{}
	if err := protojson.Unmarshal(r.Params, params); err != nil {
		return fmt.Errorf("%s execution %d params: %w", r.Table, r.ID, err)
	}
	payload := &structpb.Struct{Fields: map[string]*structpb.Value{"params": structpb.NewStructValue(params)}}
	tenant := runbook.Tenant(b.Name)
	cmd := &luciusv1.Command{TenantId: tenant, RequestType: wfID, SchemaVersion: "1", Payload: payload,
		CorrelationId: fmt.Sprintf("runbook/%s/batch/%d/%s/%d", b.Name, b.ID, r.Table, r.ID)}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cmd)
	if err != nil {
		return err
	}
	route, err := routing.Resolve(routing.Input{TenantID: tenant})
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	req := ledger.Request{
		JobID: runbook.JobID(r.Table, r.ID), TenantID: routing.Normalize(tenant), RequestHash: hex.EncodeToString(sum[:]),
		RequestType: wfID, WorkflowVersion: def.Version, CorrelationID: cmd.CorrelationId, Command: raw, Principal: "runbook:" + r.Table,
		Routing: ledger.Routing{Mode: string(route.Mode), Partition: route.Partition, RoutingKey: route.RoutingKey,
			Topic: route.Topic, DecisionSource: string(route.Source), DecisionReason: route.Reason},
		Notify: topology.TopicOrchestratorEvents,
	}
	if err := tx.InsertRequest(ctx, req); err != nil {
		return err
	}
	msg, err := engine.QueuedJobMessage(ctx, req, cmd)
	if err != nil {
		return err
	}
	tx.Enqueue(msg)
	tx.Append(ledger.Event{JobID: req.JobID, Type: ledger.EventJobAccepted, ToStatus: string(ledger.JobReceived),
		Data: map[string]any{"tenant_id": req.TenantID, "request_type": wfID, "correlation_id": cmd.CorrelationId}})
	if err := x.rows(tx).Dispatched(ctx, r, req.JobID, now); err != nil {
		return err
	}
	x.dispatched.Add(ctx, 1)
	return nil
}
