package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
)

// runbookSource is the file name runbook problems carry: the request field.
const runbookSource = "source"

// runbookService implements lucius.v1.RunbookService over the runbook store
// and the workflow registry.
type runbookService struct {
	luciusv1.UnimplementedRunbookServiceServer
	store *runbook.Store
	reg   *registry.Registry
	log   *slog.Logger
}

var _ luciusv1.RunbookServiceServer = (*runbookService)(nil)

// ApplyRunbook validates a runbook, checks that its functions can be
// registered for their worker pools, stores it (making it active) and then
// registers the handlers and generated workflows. A failure after the store
// is safe to retry: the same content again registers what is missing.
func (s *runbookService) ApplyRunbook(ctx context.Context, req *luciusv1.ApplyRunbookRequest) (*luciusv1.ApplyRunbookResponse, error) {
	rb, err := runbook.Parse(runbookSource, []byte(req.GetSource()))
	if err != nil {
		return nil, invalidRunbook(err)
	}
	plan, violations, err := s.plan(ctx, rb)
	if err != nil {
		return nil, s.error(ctx, err, nil)
	}
	if len(violations) > 0 {
		return nil, server.InvalidArgument(violations...).Err()
	}
	stored, created, err := s.store.Apply(ctx, rb, principalName(ctx))
	if err != nil {
		return nil, s.error(ctx, err, nil)
	}
	if err := s.register(ctx, plan); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "runbook applied", "principal", principalName(ctx), "runbook", rb.Name, "version", rb.Version, "created", created,
		"handlers", len(plan.handlers), "workflows", len(plan.workflows))
	return &luciusv1.ApplyRunbookResponse{Runbook: runbookToProto(stored), Created: created}, nil
}

// registration is what applying a runbook adds to the workflow registry.
type registration struct {
	handlers  []workflow.HandlerInfo
	workflows []generatedWorkflow
}

type generatedWorkflow struct {
	id     string
	source []byte
}

// plan works out the handlers and generated workflows a runbook needs that
// the registry lacks, and what stands in the way: a function another worker
// pool owns (in the catalog or in the runbook itself), or a generated
// workflow id already holding another step shape. It writes nothing.
func (s *runbookService) plan(ctx context.Context, rb *runbook.Runbook) (registration, []server.Violation, error) {
	var (
		plan       registration
		violations []server.Violation
	)
	known, err := s.reg.Handlers(ctx)
	if err != nil {
		return plan, nil, err
	}
	catalog := workflow.NewCatalog()
	owners := make(map[string]string, len(known))
	for _, h := range known {
		owners[h.Name] = h.Service
		if err := catalog.Add(h); err != nil {
			return plan, nil, err
		}
	}
	steps := runbookSteps(rb)
	declared := map[string]string{} // function → the step of this runbook that brought it
	for _, st := range steps {
		h := runbook.Handler(st)
		owner, ok := owners[h.Name]
		switch {
		case !ok:
			owners[h.Name], declared[h.Name] = h.Service, st.Name
			plan.handlers = append(plan.handlers, h)
			if err := catalog.Add(h); err != nil {
				return plan, nil, err
			}
		case owner == h.Service:
		case declared[h.Name] != "":
			violations = append(violations, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL,
				Description: fmt.Sprintf("step %s: function %s runs on worker pool %s, but step %s runs it on worker pool %s; a function belongs to one worker pool",
					st.Name, h.Name, h.Service, declared[h.Name], owner)})
		default:
			violations = append(violations, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL,
				Description: fmt.Sprintf("step %s: function %s is owned by worker pool %s, not %s", st.Name, h.Name, owner, h.Service)})
		}
	}
	if len(violations) > 0 {
		return plan, violations, nil
	}
	type firstUse struct {
		source []byte
		step   string
	}
	seen := map[string]firstUse{}
	for _, st := range steps {
		id, src := runbook.Workflow(st)
		if first, ok := seen[id]; ok {
			if !bytes.Equal(first.source, src) {
				violations = append(violations, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_GENERATED_WORKFLOW_CONFLICT,
					Description: fmt.Sprintf("step %s (function %s on worker pool %s) and step %s map to the same generated workflow %s with different settings; rename one function",
						st.Name, st.Function, st.WorkerID, first.step, id)})
			}
			continue
		}
		seen[id] = firstUse{source: src, step: st.Name}
		// The generated YAML is ours: a definition that does not validate is a bug.
		if _, err := workflow.Parse(id, src, catalog); err != nil {
			return plan, nil, fmt.Errorf("generated workflow %s of step %s: %w", id, st.Name, err)
		}
		stored, err := s.reg.Stored(ctx, id, 1)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			plan.workflows = append(plan.workflows, generatedWorkflow{id: id, source: src})
		case err != nil:
			return plan, nil, err
		case stored.SHA256 != sha256Hex(string(src)):
			violations = append(violations, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_GENERATED_WORKFLOW_CONFLICT,
				Description: fmt.Sprintf("step %s (function %s on worker pool %s): its generated workflow %s is registered with other content; rename the function",
					st.Name, st.Function, st.WorkerID, id)})
		}
	}
	return plan, violations, nil
}

// register adds the planned handlers and workflows. Only a concurrent
// registration of the same names can make it fail where plan did not.
func (s *runbookService) register(ctx context.Context, plan registration) error {
	if err := s.reg.RegisterHandlers(ctx, plan.handlers); err != nil {
		if errors.Is(err, ledger.ErrHandlerConflict) {
			return server.InvalidArgument(server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_FUNCTION_OWNED_BY_OTHER_POOL,
				Description: err.Error() + " (registered concurrently; the runbook version is stored, apply it again once resolved)"}).Err()
		}
		return s.error(ctx, err, nil)
	}
	for _, w := range plan.workflows {
		if _, _, err := s.reg.Register(ctx, w.id, w.source, principalName(ctx)); err != nil {
			if errors.Is(err, ledger.ErrDefinitionConflict) {
				return server.InvalidArgument(server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_GENERATED_WORKFLOW_CONFLICT,
					Description: err.Error() + " (registered concurrently; the runbook version is stored)"}).Err()
			}
			return s.error(ctx, err, nil)
		}
	}
	return nil
}

// runbookSteps lists every step: init, phases, rollbacks (by name), on_member_removed.
func runbookSteps(rb *runbook.Runbook) []runbook.Step {
	steps := slices.Clone(rb.Init)
	for _, ph := range rb.Phases {
		steps = append(steps, ph.Steps...)
	}
	for _, name := range slices.Sorted(maps.Keys(rb.Rollbacks)) {
		steps = append(steps, rb.Rollbacks[name]...)
	}
	return append(steps, rb.OnMemberRemoved...)
}

// invalidRunbook reports each problem of Parse ("source:line:col: message")
// as a violation of "source".
func invalidRunbook(err error) error {
	var vs []server.Violation
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			vs = append(vs, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_RUNBOOK, Description: line})
		}
	}
	return server.InvalidArgument(vs...).Err()
}

// GetRunbook returns a version, the active one by default.
func (s *runbookService) GetRunbook(ctx context.Context, req *luciusv1.GetRunbookRequest) (*luciusv1.GetRunbookResponse, error) {
	sr, err := s.store.Get(ctx, req.GetName(), int(req.GetVersion()))
	if err != nil {
		return nil, s.error(ctx, err, runbookNotFound(req.GetName(), req.GetVersion()))
	}
	return &luciusv1.GetRunbookResponse{Runbook: runbookToProto(sr)}, nil
}

// runbookCursor is the content of a ListRunbooks page token: the last version listed.
type runbookCursor struct {
	Name    string `json:"n"`
	Version int    `json:"v"`
}

// ListRunbooks pages every version by name, the latest version first. The
// versions are few: the store lists them all and the page is cut here.
func (s *runbookService) ListRunbooks(ctx context.Context, req *luciusv1.ListRunbooksRequest) (*luciusv1.ListRunbooksResponse, error) {
	size := pageSize(req, 100)
	after, paged, err := decodeCursor(req.GetPageToken(), func(c runbookCursor) bool { return c.Name != "" && c.Version >= 1 })
	if err != nil {
		return nil, err
	}
	all, err := s.store.List(ctx)
	if err != nil {
		return nil, s.error(ctx, err, nil)
	}
	resp := &luciusv1.ListRunbooksResponse{}
	for _, sr := range all {
		rb := sr.Runbook
		if paged && (rb.Name < after.Name || rb.Name == after.Name && rb.Version >= after.Version) {
			continue
		}
		if len(resp.Runbooks) == size {
			last := resp.Runbooks[size-1]
			resp.NextPageToken = encodeToken(runbookCursor{Name: last.GetName(), Version: int(last.GetVersion())})
			break
		}
		resp.Runbooks = append(resp.Runbooks, runbookToProto(sr))
	}
	return resp, nil
}

// LoadMembers checks the rows against the version's columns, reporting each
// problem as a field of the request, then upserts them.
func (s *runbookService) LoadMembers(ctx context.Context, req *luciusv1.LoadMembersRequest) (*luciusv1.LoadMembersResponse, error) {
	notFound := runbookNotFound(req.GetName(), req.GetVersion())
	sr, err := s.store.Get(ctx, req.GetName(), int(req.GetVersion()))
	if err != nil {
		return nil, s.error(ctx, err, notFound)
	}
	members, violations := membersFromProto(req.GetMembers())
	if len(violations) > 0 {
		return nil, server.InvalidArgument(violations...).Err()
	}
	if err := runbook.CheckMembers(members, sr.Runbook.Columns); err != nil {
		return nil, s.error(ctx, err, notFound)
	}
	// The version Get resolved, not 0: a version applied meanwhile has other
	// columns than the ones just checked.
	version := sr.Runbook.Version
	res, err := s.store.LoadMembers(ctx, sr.Runbook.Name, version, members, req.GetReplace())
	if err != nil {
		return nil, s.error(ctx, err, notFound)
	}
	s.log.InfoContext(ctx, "members loaded", "principal", principalName(ctx), "runbook", sr.Runbook.Name, "version", version, "rows", len(members),
		"replace", req.GetReplace(), "inserted", res.Inserted, "updated", res.Updated, "unchanged", res.Unchanged, "removed", res.Removed)
	return &luciusv1.LoadMembersResponse{Version: int32(version), Inserted: int32(res.Inserted), Updated: int32(res.Updated),
		Unchanged: int32(res.Unchanged), Removed: int32(res.Removed)}, nil
}

// membersFromProto converts the rows; a batch_time that is not a valid
// timestamp is reported here (a missing one is CheckMembers').
func membersFromProto(in []*luciusv1.RunbookMember) ([]runbook.Member, []server.Violation) {
	out := make([]runbook.Member, len(in))
	var vs []server.Violation
	for i, m := range in {
		out[i] = runbook.Member{Key: m.GetMemberKey(), Values: m.GetValues()}
		switch ts := m.GetBatchTime(); {
		case ts == nil:
		case ts.IsValid():
			out[i].BatchTime = ts.AsTime()
		default:
			vs = append(vs, server.Violation{Field: fmt.Sprintf("members[%d].batch_time", i), Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS,
				Description: "is not a valid timestamp: " + ts.CheckValid().Error()})
		}
	}
	return out, vs
}

// ListBatches pages a runbook's batches, newest first; the page token is the
// last batch id listed.
func (s *runbookService) ListBatches(ctx context.Context, req *luciusv1.ListBatchesRequest) (*luciusv1.ListBatchesResponse, error) {
	size := pageSize(req, 50)
	after, err := decodeIDToken(req.GetPageToken(), 1)
	if err != nil {
		return nil, err
	}
	batches, err := s.store.Batches(ctx, req.GetRunbookName(), after, size+1)
	if err != nil {
		return nil, s.error(ctx, err, runbookNotFound(req.GetRunbookName(), 0))
	}
	resp := &luciusv1.ListBatchesResponse{}
	batches, resp.NextPageToken = cutPage(batches, size, func(last runbook.BatchView) string { return encodeIDToken(last.ID) })
	for i := range batches {
		resp.Batches = append(resp.Batches, batchToProto(&batches[i]))
	}
	return resp, nil
}

// GetBatch returns a batch with its phase and init executions.
func (s *runbookService) GetBatch(ctx context.Context, req *luciusv1.GetBatchRequest) (*luciusv1.GetBatchResponse, error) {
	b, err := s.store.Batch(ctx, req.GetBatchId())
	if err != nil {
		id := strconv.FormatInt(req.GetBatchId(), 10)
		return nil, s.error(ctx, err, &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_BATCH_NOT_FOUND, Message: "batch " + id + " not found", Metadata: []string{"batch_id", id}})
	}
	return &luciusv1.GetBatchResponse{Batch: batchToProto(b)}, nil
}

// ListBatchMembers lists a batch's members with their step executions.
func (s *runbookService) ListBatchMembers(ctx context.Context, req *luciusv1.ListBatchMembersRequest) (*luciusv1.ListBatchMembersResponse, error) {
	size := pageSize(req, 100)
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	members, err := s.store.BatchMembers(ctx, req.GetBatchId(), after, size+1)
	if err != nil {
		id := strconv.FormatInt(req.GetBatchId(), 10)
		return nil, s.error(ctx, err, &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_BATCH_NOT_FOUND, Message: "batch " + id + " not found", Metadata: []string{"batch_id", id}})
	}
	resp := &luciusv1.ListBatchMembersResponse{}
	members, resp.NextPageToken = cutPage(members, size, func(last runbook.MemberView) string { return encodeToken(last.Key) })
	for _, m := range members {
		status := luciusv1.BatchMemberStatus_BATCH_MEMBER_STATUS_ACTIVE
		if m.Status == "removed" {
			status = luciusv1.BatchMemberStatus_BATCH_MEMBER_STATUS_REMOVED
		}
		pm := &luciusv1.BatchMember{MemberKey: m.Key, Status: status, AddTime: ts(m.AddedAt), RemoveTime: ts(m.RemovedAt)}
		for _, st := range m.Steps {
			pm.Steps = append(pm.Steps, &luciusv1.MemberStepExecution{PhaseName: st.PhaseName, Kind: st.Kind, StepName: st.StepName,
				StepIndex: int32(st.StepIndex), WorkerId: st.WorkerID, Function: st.Function, Status: stepExecutionStatus(st.Status),
				JobId: st.JobID, ErrorMessage: st.Error, PollCount: int32(st.PollCount), DispatchTime: ts(st.DispatchedAt),
				CompleteTime: ts(st.CompletedAt)})
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}

// runbookNotFound says which runbook a request addressed, for its NOT_FOUND answer.
func runbookNotFound(name string, version int32) *apistatus.NotFound {
	what := "runbook " + name
	if version != 0 {
		what += " version " + strconv.Itoa(int(version))
	}
	return &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_NOT_FOUND, Message: what + " not found",
		Metadata: []string{"name", name, "version", strconv.Itoa(int(version))}}
}

// error maps the runbook store's errors to API statuses through apiError.
func (s *runbookService) error(ctx context.Context, err error, missing *apistatus.NotFound) error {
	return apiError(ctx, s.log, "runbook store", "runbooks", err, missing)
}

func runbookToProto(sr *runbook.StoredRunbook) *luciusv1.Runbook {
	rb := sr.Runbook
	out := &luciusv1.Runbook{
		Name: rb.Name, Version: int32(rb.Version), Description: rb.Description, Source: string(rb.Source),
		Sha256: sr.ContentHash, Columns: rb.Columns, DataTable: sr.DataTable, Active: sr.Active,
		OverdueBehavior: overdueToProto(rb.OverdueBehavior), RerunInit: rb.RerunInit,
		IgnoreOverdueApplied: sr.IgnoreOverdueApplied, Init: stepsToProto(rb.Init),
		OnMemberRemoved: stepsToProto(rb.OnMemberRemoved), CreateTime: ts(sr.CreatedAt), ActivateTime: ts(sr.ActivatedAt),
		CreatedBy: sr.CreatedBy, ActivatedBy: sr.ActivatedBy,
	}
	for _, ph := range rb.Phases {
		out.Phases = append(out.Phases, &luciusv1.RunbookPhase{Name: ph.Name, OffsetMinutes: int32(ph.OffsetMinutes),
			Steps: stepsToProto(ph.Steps)})
	}
	for _, name := range slices.Sorted(maps.Keys(rb.Rollbacks)) {
		out.Rollbacks = append(out.Rollbacks, &luciusv1.RunbookRollback{Name: name, Steps: stepsToProto(rb.Rollbacks[name])})
	}
	return out
}

func stepsToProto(steps []runbook.Step) []*luciusv1.RunbookStep {
	var out []*luciusv1.RunbookStep
	for _, st := range steps {
		id, _ := runbook.Workflow(st)
		out = append(out, &luciusv1.RunbookStep{Name: st.Name, WorkerId: st.WorkerID, Function: st.Function,
			IsPollStep: st.IsPollStep, PollIntervalSec: int32(st.PollIntervalSec), PollTimeoutSec: int32(st.PollTimeoutSec),
			OnFailure: st.OnFailure, TimeoutSeconds: int32(st.TimeoutSeconds), WorkflowId: id})
	}
	return out
}

func overdueToProto(b string) luciusv1.OverdueBehavior {
	switch b {
	case runbook.OverdueRerun:
		return luciusv1.OverdueBehavior_OVERDUE_BEHAVIOR_RERUN
	case runbook.OverdueIgnore:
		return luciusv1.OverdueBehavior_OVERDUE_BEHAVIOR_IGNORE
	}
	return luciusv1.OverdueBehavior_OVERDUE_BEHAVIOR_UNSPECIFIED
}

// enumValue finds the value of a lowercase status in an enum with prefix
// (BATCH_STATUS_ + ACTIVE); an unknown status is 0 (UNSPECIFIED).
func enumValue(values map[string]int32, prefix, status string) int32 {
	return values[prefix+strings.ToUpper(status)]
}

func batchToProto(b *runbook.BatchView) *luciusv1.Batch {
	out := &luciusv1.Batch{
		BatchId: b.ID, RunbookName: b.RunbookName, RunbookVersion: int32(b.RunbookVersion),
		BatchStartTime: timestamppb.New(b.StartTime),
		Status:         luciusv1.BatchStatus(enumValue(luciusv1.BatchStatus_value, "BATCH_STATUS_", b.Status)),
		DetectTime:     ts(b.DetectedAt), InitDispatchTime: ts(b.InitDispatchedAt), CompleteTime: ts(b.CompletedAt),
		ActiveMemberCount: int32(b.ActiveMembers), RemovedMemberCount: int32(b.RemovedMembers),
	}
	for _, p := range b.Phases {
		out.PhaseExecutions = append(out.PhaseExecutions, &luciusv1.PhaseExecution{
			PhaseExecutionId: p.ID, PhaseName: p.PhaseName, OffsetMinutes: int32(p.OffsetMinutes), DueTime: ts(p.DueAt),
			RunbookVersion: int32(p.RunbookVersion),
			Status:         luciusv1.PhaseExecutionStatus(enumValue(luciusv1.PhaseExecutionStatus_value, "PHASE_EXECUTION_STATUS_", p.Status)),
			DispatchTime:   ts(p.DispatchedAt), CompleteTime: ts(p.CompletedAt), StepCounts: stepCountsToProto(p.Steps),
		})
	}
	for _, e := range b.Init {
		out.InitExecutions = append(out.InitExecutions, &luciusv1.InitExecution{
			InitExecutionId: e.ID, StepName: e.StepName, StepIndex: int32(e.StepIndex), RunbookVersion: int32(e.RunbookVersion),
			WorkerId: e.WorkerID, Function: e.Function, Status: stepExecutionStatus(e.Status), JobId: e.JobID,
			ErrorMessage: e.Error, PollCount: int32(e.PollCount), DispatchTime: ts(e.DispatchedAt), CompleteTime: ts(e.CompletedAt),
		})
	}
	return out
}

func stepExecutionStatus(s string) luciusv1.StepExecutionStatus {
	return luciusv1.StepExecutionStatus(enumValue(luciusv1.StepExecutionStatus_value, "STEP_EXECUTION_STATUS_", s))
}

func stepCountsToProto(counts map[string]int) *luciusv1.StepExecutionCounts {
	c := &luciusv1.StepExecutionCounts{}
	for status, n := range counts {
		c.Total += int32(n)
		switch status {
		case runbook.StepPending:
			c.Pending = int32(n)
		case runbook.StepDispatched:
			c.Dispatched = int32(n)
		case runbook.StepSucceeded:
			c.Succeeded = int32(n)
		case runbook.StepFailed:
			c.Failed = int32(n)
		case runbook.StepPolling:
			c.Polling = int32(n)
		case runbook.StepPollTimeout:
			c.PollTimeout = int32(n)
		case runbook.StepRolledBack:
			c.RolledBack = int32(n)
		case runbook.StepCancelled:
			c.Cancelled = int32(n)
		}
	}
	return c
}
