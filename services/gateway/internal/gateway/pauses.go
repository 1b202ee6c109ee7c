package gateway

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
)

// PauseWork stores a pause in the live configuration.
func (s *configService) PauseWork(ctx context.Context, req *luciusv1.PauseWorkRequest) (*luciusv1.PauseWorkResponse, error) {
	scope, key, err := pauseTarget(req.GetScope(), req.GetKey())
	if err != nil {
		return nil, err
	}
	p, err := s.watcher.Store().Pause(ctx, config.Pause{Scope: scope, Key: key, Reason: req.GetReason(),
		RefuseSubmits: req.GetRefuseSubmits(), PausedBy: principalName(ctx)})
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	s.changed(ctx, "work paused", "scope", scope, "key", key, "reason", req.GetReason(), "refuse_submits", req.GetRefuseSubmits())
	return &luciusv1.PauseWorkResponse{Pause: pauseToProto(p)}, nil
}

// ResumeWork lifts a pause; the reconciler dispatches what it held.
func (s *configService) ResumeWork(ctx context.Context, req *luciusv1.ResumeWorkRequest) (*luciusv1.ResumeWorkResponse, error) {
	scope, key, err := pauseTarget(req.GetScope(), req.GetKey())
	if err != nil {
		return nil, err
	}
	err = s.watcher.Store().Resume(ctx, scope, key, principalName(ctx))
	if errors.Is(err, config.ErrNoPause) {
		return nil, server.Error(codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_PAUSE_NOT_FOUND, "nothing is paused there: "+err.Error(),
			"scope", scope, "key", key).Err()
	}
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	s.changed(ctx, "work resumed", "scope", scope, "key", key)
	return &luciusv1.ResumeWorkResponse{}, nil
}

// ListPauses pages the pauses in force by scope and key.
func (s *configService) ListPauses(ctx context.Context, req *luciusv1.ListPausesRequest) (*luciusv1.ListPausesResponse, error) {
	size := pageSize(req, 100)
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	snap, err := s.watcher.Store().Load(ctx)
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	resp := &luciusv1.ListPausesResponse{}
	for _, p := range snap.Pauses { // ordered by scope, key
		if k := p.Scope + "/" + p.Key; k > after {
			if len(resp.Pauses) == size {
				resp.NextPageToken = encodeToken(pauseKey(resp.Pauses[size-1]))
				break
			}
			resp.Pauses = append(resp.Pauses, pauseToProto(p))
		}
	}
	return resp, nil
}

// pauseTarget is a request's scope and normalized key, or a field violation.
func pauseTarget(scope luciusv1.PauseScope, key string) (string, string, error) {
	sc := pauseScope(scope)
	k, err := config.NormalizePauseKey(sc, key)
	if err != nil {
		return "", "", server.InvalidArgument(server.Violation{Field: "key", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, Description: err.Error()}).Err()
	}
	return sc, k, nil
}

func pauseScope(s luciusv1.PauseScope) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "PAUSE_SCOPE_"))
}

func pauseKey(p *luciusv1.Pause) string { return pauseScope(p.GetScope()) + "/" + p.GetKey() }

func pauseToProto(p config.Pause) *luciusv1.Pause {
	return &luciusv1.Pause{Scope: luciusv1.PauseScope(luciusv1.PauseScope_value["PAUSE_SCOPE_"+strings.ToUpper(p.Scope)]),
		Key: p.Key, Reason: p.Reason, RefuseSubmits: p.RefuseSubmits, PausedBy: p.PausedBy, PauseTime: ts(p.PausedAt)}
}
