package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// workflowService implements lucius.v1.WorkflowService over the registry.
type workflowService struct {
	luciusv1.UnimplementedWorkflowServiceServer
	reg *registry.Registry
	log *slog.Logger
}

var _ luciusv1.WorkflowServiceServer = (*workflowService)(nil)

// RegisterWorkflow validates and stores a definition.
func (s *workflowService) RegisterWorkflow(ctx context.Context, req *luciusv1.RegisterWorkflowRequest) (*luciusv1.RegisterWorkflowResponse, error) {
	def, created, err := s.reg.Register(ctx, "source", []byte(req.GetSource()), principalName(ctx))
	switch {
	case errors.Is(err, registry.ErrInvalid):
		return nil, invalidWorkflow(err)
	case errors.Is(err, ledger.ErrDefinitionConflict):
		return nil, server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_VERSION_EXISTS,
			"this version is already registered with different content; versions are immutable, register the next version",
		).Err()
	case err != nil:
		return nil, s.unavailable(ctx, err)
	}
	stored, err := s.reg.Stored(ctx, def.ID, def.Version)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	s.log.InfoContext(ctx, "workflow registered", "workflow", def.Key(), "created", created, "principal", principalName(ctx))
	return &luciusv1.RegisterWorkflowResponse{Workflow: workflowToProto(def, stored), Created: created}, nil
}

// ValidateWorkflow checks a definition without storing it.
func (s *workflowService) ValidateWorkflow(ctx context.Context, req *luciusv1.ValidateWorkflowRequest) (*luciusv1.ValidateWorkflowResponse, error) {
	def, err := s.reg.Validate(ctx, "source", []byte(req.GetSource()))
	if errors.Is(err, registry.ErrInvalid) {
		return &luciusv1.ValidateWorkflowResponse{Valid: false, Errors: problems(err)}, nil
	}
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return &luciusv1.ValidateWorkflowResponse{Valid: true, Workflow: workflowToProto(def, nil)}, nil
}

// GetWorkflow returns a version (the latest by default).
func (s *workflowService) GetWorkflow(ctx context.Context, req *luciusv1.GetWorkflowRequest) (*luciusv1.GetWorkflowResponse, error) {
	stored, err := s.reg.Stored(ctx, req.GetWorkflowId(), int(req.GetVersion()))
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, server.Error(codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_NOT_FOUND, "workflow "+req.GetWorkflowId()+" not found",
			"workflow_id", req.GetWorkflowId()).Err()
	}
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	def, err := s.reg.Get(ctx, stored.WorkflowID, stored.Version)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return &luciusv1.GetWorkflowResponse{Workflow: workflowToProto(def, stored)}, nil
}

// ListWorkflows lists the latest version of each workflow, by id.
func (s *workflowService) ListWorkflows(ctx context.Context, req *luciusv1.ListWorkflowsRequest) (*luciusv1.ListWorkflowsResponse, error) {
	size := pageSize(req, 100)
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	stored, err := s.reg.Store().ListDefinitions(ctx, after, size+1)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	resp := &luciusv1.ListWorkflowsResponse{}
	stored, resp.NextPageToken = cutPage(stored, size, func(last *ledger.StoredDefinition) string { return encodeToken(last.WorkflowID) })
	for _, st := range stored {
		def, err := s.reg.Get(ctx, st.WorkflowID, st.Version)
		if err != nil {
			return nil, s.unavailable(ctx, err)
		}
		resp.Workflows = append(resp.Workflows, workflowToProto(def, st))
	}
	return resp, nil
}

func (s *workflowService) unavailable(ctx context.Context, err error) error {
	s.log.ErrorContext(ctx, "workflow registry", "err", err)
	return server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "the workflow registry is unavailable; retry").Err()
}

// invalidWorkflow reports each validation problem as a violation of "source";
// a definition over a limit as one WORKFLOW_TOO_LARGE violation.
func invalidWorkflow(err error) error {
	if le, ok := errors.AsType[*workflow.LimitError](err); ok {
		return server.InvalidArgument(server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_TOO_LARGE,
			Description: strings.TrimPrefix(le.Error(), "source:")}).Err()
	}
	var vs []server.Violation
	for _, p := range problems(err) {
		vs = append(vs, server.Violation{Field: "source", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_WORKFLOW, Description: p})
	}
	return server.InvalidArgument(vs...).Err()
}

// problems splits a validation error into one line per problem, without the
// registry's prefix and the placeholder file name.
func problems(err error) []string {
	msg := strings.TrimPrefix(err.Error(), registry.ErrInvalid.Error()+": ")
	var out []string
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimPrefix(strings.TrimSpace(line), "source:"); line != "" {
			out = append(out, line)
		}
	}
	return out
}

func workflowToProto(d *workflow.Definition, stored *ledger.StoredDefinition) *luciusv1.Workflow {
	w := &luciusv1.Workflow{WorkflowId: d.ID, Version: int32(d.Version), Name: d.Name, Description: d.Description,
		Source: string(d.Source)}
	if stored != nil {
		w.Sha256, w.RegisterTime, w.RegisteredBy = stored.SHA256, ts(stored.RegisteredAt), stored.RegisteredBy
	}
	for _, name := range sortedKeys(d.Inputs) {
		in := d.Inputs[name]
		wi := &luciusv1.WorkflowInput{Name: name, Type: in.Type, Required: in.Required}
		if in.Default != nil {
			if v, err := structpb.NewValue(in.Default); err == nil {
				wi.DefaultValue = v
			}
		}
		w.Inputs = append(w.Inputs, wi)
	}
	for _, n := range d.Nodes {
		wn := &luciusv1.WorkflowNode{NodeId: n.ID, Type: n.Type, Next: n.Next}
		if n.Task != nil {
			wn.Handler, wn.Service = n.Task.Handler, n.Task.Service
		}
		for _, b := range n.Branches {
			wn.Next = append(wn.Next, b.Next)
		}
		w.Nodes = append(w.Nodes, wn)
	}
	return w
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
