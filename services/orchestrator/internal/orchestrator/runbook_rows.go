package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// batchRow is a batch, locked for the handler's transaction: every executor
// change to a batch's rows happens under this lock, so competing
// orchestrators serialize per batch.
type batchRow struct {
	ID        int64
	RunbookID int64
	Name      string
	Start     time.Time
	Status    string
	Version   int // the governing version
	DataTable string
}

func lockBatch(ctx context.Context, tx *ledger.Tx, id int64) (*batchRow, error) {
	var b batchRow
	err := tx.SQL().QueryRow(ctx, `SELECT b.id, b.runbook_id, b.runbook_name, b.batch_start_time, b.status, r.version, r.data_table_name
		FROM batches b JOIN runbooks r ON r.id = b.runbook_id WHERE b.id = $1 FOR UPDATE OF b`, id).
		Scan(&b.ID, &b.RunbookID, &b.Name, &b.Start, &b.Status, &b.Version, &b.DataTable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, runbook.ErrNotFound)
	}
	return &b, err
}

func setBatchStatus(ctx context.Context, tx *ledger.Tx, b *batchRow, status string, now time.Time) error {
	if b.Status == status {
		return nil
	}
	b.Status = status
	_, err := tx.SQL().Exec(ctx, `UPDATE batches SET status = $2,
		completed_at = CASE WHEN $2 IN ('completed', 'failed') THEN $3::timestamptz ELSE completed_at END WHERE id = $1`,
		b.ID, status, now)
	return err
}

// execRow is a step or init execution: one unit of runbook work, run as one
// Lucius job.
type execRow struct {
	Table       string // runbook.TableSteps or runbook.TableInit
	ID          int64
	BatchID     int64
	PhaseID     int64 // 0: init and removal steps
	MemberID    int64 // 0: init steps
	Kind        string
	ParentID    int64
	StepName    string
	StepIndex   int
	Version     int // init rows only; steps take their phase's or batch's
	WorkerID    string
	Function    string
	Params      json.RawMessage
	Status      string
	JobID       string
	IsPoll      bool
	PollTimeout int
	PollStarted time.Time
	PollCount   int
	OnFailure   string
}

// terminal reports whether the row's work is over.
func (r *execRow) terminal() bool {
	switch r.Status {
	case runbook.StepPending, runbook.StepDispatched, runbook.StepPolling:
		return false
	}
	return true
}

const (
	stepSelect = `SELECT s.id, m.batch_id, coalesce(s.phase_execution_id, 0), s.batch_member_id, s.kind, coalesce(s.parent_id, 0),
		s.step_name, s.step_index, 0, s.worker_id, s.function_name, s.params_json, s.status, coalesce(s.job_id, ''),
		s.is_poll_step, coalesce(s.poll_timeout_sec, 0), s.poll_started_at, s.poll_count, s.on_failure
		FROM step_executions s JOIN batch_members m ON m.id = s.batch_member_id`
	initSelect = `SELECT i.id, i.batch_id, 0, 0, 'init', 0, i.step_name, i.step_index, i.runbook_version, i.worker_id,
		i.function_name, i.params_json, i.status, coalesce(i.job_id, ''), i.is_poll_step, coalesce(i.poll_timeout_sec, 0),
		i.poll_started_at, i.poll_count, '' FROM init_executions i`
)

func scanExec(table string) func(pgx.CollectableRow) (*execRow, error) {
	return func(row pgx.CollectableRow) (*execRow, error) {
		r := &execRow{Table: table}
		var started *time.Time
		err := row.Scan(&r.ID, &r.BatchID, &r.PhaseID, &r.MemberID, &r.Kind, &r.ParentID, &r.StepName, &r.StepIndex,
			&r.Version, &r.WorkerID, &r.Function, &r.Params, &r.Status, &r.JobID, &r.IsPoll, &r.PollTimeout, &started,
			&r.PollCount, &r.OnFailure)
		if started != nil {
			r.PollStarted = *started
		}
		return r, err
	}
}

// execs lists execution rows; query is stepSelect or initSelect plus a filter.
func execs(ctx context.Context, tx *ledger.Tx, table, query string, args ...any) ([]*execRow, error) {
	rows, err := tx.SQL().Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanExec(table))
}

// execByJob finds the execution a job runs.
func execByJob(ctx context.Context, tx *ledger.Tx, jobID string) (*execRow, error) {
	for _, q := range []struct{ table, sql string }{
		{runbook.TableSteps, stepSelect + ` WHERE s.job_id = $1`},
		{runbook.TableInit, initSelect + ` WHERE i.job_id = $1`},
	} {
		rows, err := execs(ctx, tx, q.table, q.sql, jobID)
		if err != nil {
			return nil, err
		}
		if len(rows) == 1 {
			return rows[0], nil
		}
	}
	return nil, runbook.ErrNotFound
}

// execByID reads one execution row.
func execByID(ctx context.Context, tx *ledger.Tx, table string, id int64) (*execRow, error) {
	query := stepSelect + ` WHERE s.id = $1`
	if table == runbook.TableInit {
		query = initSelect + ` WHERE i.id = $1`
	}
	rows, err := execs(ctx, tx, table, query, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s execution %d: %w", table, id, runbook.ErrNotFound)
	}
	return rows[0], nil
}

func tableName(table string) string {
	if table == runbook.TableInit {
		return "init_executions"
	}
	return "step_executions"
}

// finishExec ends a row's work with status (and, for failures, a message).
func finishExec(ctx context.Context, tx *ledger.Tx, r *execRow, status string, result json.RawMessage, errMsg string, now time.Time) error {
	r.Status = status
	_, err := tx.SQL().Exec(ctx, `UPDATE `+tableName(r.Table)+` SET status = $2, result_json = coalesce($3, result_json),
		error_message = nullif($4, ''), completed_at = $5 WHERE id = $1`, r.ID, status, jsonOrNil(result), errMsg, now)
	return err
}

// pollingExec records a "still in progress" answer.
func pollingExec(ctx context.Context, tx *ledger.Tx, r *execRow, result json.RawMessage, now time.Time) error {
	r.Status = runbook.StepPolling
	_, err := tx.SQL().Exec(ctx, `UPDATE `+tableName(r.Table)+` SET status = 'polling', result_json = coalesce($2, result_json),
		poll_started_at = coalesce(poll_started_at, $3), last_polled_at = $3 WHERE id = $1`, r.ID, jsonOrNil(result), now)
	return err
}

// cancelExecs cancels a set of rows that have not ended, returning the jobs
// that were running for them (to cancel after commit).
func cancelExecs(ctx context.Context, tx *ledger.Tx, rows []*execRow, why string, now time.Time) ([]string, error) {
	var jobs []string
	for _, r := range rows {
		if r.terminal() {
			continue
		}
		if r.JobID != "" {
			jobs = append(jobs, r.JobID)
		}
		if err := finishExec(ctx, tx, r, runbook.StepCancelled, nil, why, now); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

func jsonOrNil(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// dispatchExec submits the job that runs an execution row, in tx: a request
// and its orchestrator-jobs message, like a submitted command, with the
// executor's topic to notify. The job runs the step's generated workflow, its
// payload exactly the row's params.
func (x *runbookExecutor) dispatchExec(ctx context.Context, tx *ledger.Tx, b *batchRow, r *execRow, step runbook.Step, now time.Time) error {
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
	r.Status, r.JobID = runbook.StepDispatched, req.JobID
	_, err = tx.SQL().Exec(ctx, `UPDATE `+tableName(r.Table)+` SET status = 'dispatched', dispatched_at = $2, job_id = $3
		WHERE id = $1`, r.ID, now, req.JobID)
	x.dispatched.Add(ctx, 1)
	return err
}
