package gateway

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// WorkerHeartbeat is how often a worker announces itself again; an instance
// unseen for three of them is no longer live, and a service unseen for
// workersShownFor drops out of ListWorkers (its handlers stay in the catalog).
const (
	WorkerHeartbeat = 30 * time.Second
	workersShownFor = 24 * time.Hour
)

// workerService implements lucius.v1.WorkerService from the ledger.
type workerService struct {
	luciusv1.UnimplementedWorkerServiceServer
	store *ledger.Store
	log   *slog.Logger
}

var _ luciusv1.WorkerServiceServer = (*workerService)(nil)

// RegisterWorker records a worker's announcement; its handlers join the
// catalog at once.
func (s *workerService) RegisterWorker(ctx context.Context, req *luciusv1.RegisterWorkerRequest) (*luciusv1.RegisterWorkerResponse, error) {
	if !auth.FromContext(ctx).Serves(req.GetService()) {
		return nil, server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_SERVICE_NOT_SERVED,
			"this worker identity does not serve service "+req.GetService(), "service", req.GetService()).Err()
	}
	w := ledger.WorkerInstance{Service: req.GetService(), InstanceID: req.GetInstanceId(), Version: req.GetVersion()}
	for _, h := range req.GetHandlers() {
		w.Handlers = append(w.Handlers, ledger.WorkerHandler{Name: h.GetName(), Version: h.GetVersion(), Description: h.GetDescription()})
	}
	err := s.store.RegisterWorker(ctx, w)
	if errors.Is(err, ledger.ErrHandlerConflict) {
		return nil, server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_HANDLER_OWNED_BY_ANOTHER_SERVICE,
			err.Error()+"; name the handler differently", "service", req.GetService()).Err()
	}
	if err != nil {
		return nil, ledgerError(ctx, s.log, "register worker", err, "service", req.GetService())
	}
	s.log.DebugContext(ctx, "worker announced", "service", w.Service, "instance", w.InstanceID, "handlers", len(w.Handlers))
	return &luciusv1.RegisterWorkerResponse{HeartbeatInterval: durationpb.New(WorkerHeartbeat)}, nil
}

// ListWorkers groups the instances seen within a day by service; a
// service's handlers are those its most recently seen instance announced.
func (s *workerService) ListWorkers(ctx context.Context, req *luciusv1.ListWorkersRequest) (*luciusv1.ListWorkersResponse, error) {
	size := pageSize(req, 100)
	filter := ledger.WorkerFilter{Service: req.GetService(), Services: size + 1, Since: workersShownFor}
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	filter.After = after
	instances, err := s.store.WorkerInstances(ctx, filter)
	if err != nil {
		return nil, ledgerError(ctx, s.log, "list workers", err)
	}
	byService := map[string]*luciusv1.Worker{}
	newest := map[string]time.Time{}
	live := time.Now().Add(-3 * WorkerHeartbeat)
	for _, in := range instances {
		w := byService[in.Service]
		if w == nil {
			w = &luciusv1.Worker{Service: in.Service}
			byService[in.Service] = w
		}
		w.Instances = append(w.Instances, &luciusv1.WorkerInstance{InstanceId: in.InstanceID, Version: in.Version,
			StartTime: timestamppb.New(in.StartedAt), LastSeenTime: timestamppb.New(in.LastSeenAt), Live: in.LastSeenAt.After(live)})
		if in.LastSeenAt.After(newest[in.Service]) {
			newest[in.Service] = in.LastSeenAt
			w.LastSeenTime = timestamppb.New(in.LastSeenAt)
			w.Handlers = nil
			for _, h := range in.Handlers {
				w.Handlers = append(w.Handlers, &luciusv1.HandlerInfo{Name: h.Name, Version: h.Version, Description: h.Description})
			}
		}
	}
	resp := &luciusv1.ListWorkersResponse{}
	services := slices.Sorted(maps.Keys(byService))
	services, resp.NextPageToken = cutPage(services, size, func(last string) string { return encodeToken(last) })
	for _, svc := range services {
		resp.Workers = append(resp.Workers, byService[svc])
	}
	return resp, nil
}
