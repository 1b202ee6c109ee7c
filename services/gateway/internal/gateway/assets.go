package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/ledger"
)

// assetService implements lucius.v1.AssetService from the ledger. Every call
// names its tenant; a tenant the caller does not hold has no assets for it
// (NOT_FOUND, as a missing asset).
type assetService struct {
	luciusv1.UnimplementedAssetServiceServer
	store *ledger.Store
	log   *slog.Logger
}

var _ luciusv1.AssetServiceServer = (*assetService)(nil)

// GetAsset returns an asset by id.
func (s *assetService) GetAsset(ctx context.Context, req *luciusv1.GetAssetRequest) (*luciusv1.GetAssetResponse, error) {
	a, err := s.get(ctx, req.GetTenantId(), req.GetAssetId())
	if err != nil {
		return nil, err
	}
	return &luciusv1.GetAssetResponse{Asset: a}, nil
}

// LookupAsset finds the asset a platform's identifiers name.
func (s *assetService) LookupAsset(ctx context.Context, req *luciusv1.LookupAssetRequest) (*luciusv1.LookupAssetResponse, error) {
	a, err := s.get(ctx, req.GetTenantId(), ledger.AssetIDOf(req.GetPlatformId(), req.GetPlatformRefs()))
	if err != nil {
		return nil, err
	}
	return &luciusv1.LookupAssetResponse{Asset: a}, nil
}

// ListAssetRevisions lists an asset's revisions, newest first.
func (s *assetService) ListAssetRevisions(ctx context.Context, req *luciusv1.ListAssetRevisionsRequest) (*luciusv1.ListAssetRevisionsResponse, error) {
	tenant, id := routing.Normalize(req.GetTenantId()), req.GetAssetId()
	if _, err := s.get(ctx, tenant, id); err != nil {
		return nil, err
	}
	size := pageSize(req, 50)
	before, err := decodeIDToken(req.GetPageToken(), 2) // the oldest revision on a page before is 2 or more
	if err != nil {
		return nil, err
	}
	revs, err := s.store.AssetRevisions(ctx, tenant, id, int(before), size+1)
	if err != nil {
		return nil, s.error(ctx, err, id)
	}
	resp := &luciusv1.ListAssetRevisionsResponse{}
	revs, resp.NextPageToken = cutPage(revs, size, func(last ledger.AssetRevision) string { return encodeIDToken(int64(last.Revision)) })
	for _, r := range revs {
		resp.Revisions = append(resp.Revisions, &luciusv1.AssetRevision{Revision: int32(r.Revision), JobId: r.JobID,
			Status: jobStatusToProto(r.Status), ContentHash: r.ContentHash, Current: r.Current,
			CreateTime: ts(r.CreatedAt), CompleteTime: ts(r.CompletedAt)})
	}
	return resp, nil
}

// RollbackAsset makes an earlier succeeded revision current again.
func (s *assetService) RollbackAsset(ctx context.Context, req *luciusv1.RollbackAssetRequest) (*luciusv1.RollbackAssetResponse, error) {
	tenant, id := routing.Normalize(req.GetTenantId()), req.GetAssetId()
	if err := s.held(ctx, tenant, id); err != nil {
		return nil, err
	}
	a, err := s.store.RollbackAsset(ctx, tenant, id, int(req.GetRevision()))
	if errors.Is(err, ledger.ErrRevisionNotSucceeded) {
		return nil, server.Error(codes.FailedPrecondition, luciusv1.ErrorReason_ERROR_REASON_REVISION_NOT_SUCCEEDED,
			"only a revision that succeeded can become current: "+err.Error(), "asset_id", id).Err()
	}
	if err != nil {
		return nil, s.error(ctx, err, id)
	}
	s.log.InfoContext(ctx, "asset rolled back", "asset_id", id, telemetry.TenantID(tenant), "revision", req.GetRevision(),
		"current_job_id", a.CurrentJobID, "principal", principalName(ctx))
	return &luciusv1.RollbackAssetResponse{Asset: assetToProto(a)}, nil
}

// DeleteAsset soft-deletes an asset.
func (s *assetService) DeleteAsset(ctx context.Context, req *luciusv1.DeleteAssetRequest) (*luciusv1.DeleteAssetResponse, error) {
	tenant, id := routing.Normalize(req.GetTenantId()), req.GetAssetId()
	if err := s.held(ctx, tenant, id); err != nil {
		return nil, err
	}
	a, err := s.store.DeleteAsset(ctx, tenant, id, principalName(ctx))
	if err != nil {
		return nil, s.error(ctx, err, id)
	}
	s.log.InfoContext(ctx, "asset deleted", "asset_id", id, telemetry.TenantID(tenant), "principal", principalName(ctx))
	return &luciusv1.DeleteAssetResponse{Asset: assetToProto(a)}, nil
}

// SetAssetApproval records the partner platform's review of an asset.
func (s *assetService) SetAssetApproval(ctx context.Context, req *luciusv1.SetAssetApprovalRequest) (*luciusv1.SetAssetApprovalResponse, error) {
	tenant, id := routing.Normalize(req.GetTenantId()), req.GetAssetId()
	if err := s.held(ctx, tenant, id); err != nil {
		return nil, err
	}
	state := strings.TrimPrefix(req.GetApprovalState().String(), "APPROVAL_STATE_")
	a, err := s.store.SetAssetApproval(ctx, tenant, id, state, req.GetNote(), principalName(ctx))
	if errors.Is(err, ledger.ErrAssetDeleted) {
		return nil, server.Error(codes.FailedPrecondition, luciusv1.ErrorReason_ERROR_REASON_ASSET_DELETED,
			"the asset is deleted; its approval can no longer change", "asset_id", id).Err()
	}
	if err != nil {
		return nil, s.error(ctx, err, id)
	}
	s.log.InfoContext(ctx, "asset approval set", "asset_id", id, telemetry.TenantID(tenant), "approval_state", state,
		"principal", principalName(ctx))
	return &luciusv1.SetAssetApprovalResponse{Asset: assetToProto(a)}, nil
}

// held refuses, as NOT_FOUND, a tenant the caller does not hold: it has no
// assets for the caller. (Rollback and delete find a missing asset
// themselves: NOT_FOUND too.)
func (s *assetService) held(ctx context.Context, tenant, id string) error {
	if !auth.FromContext(ctx).CanActFor(routing.Normalize(tenant)) {
		return s.error(ctx, ledger.ErrNotFound, id)
	}
	return nil
}

// get loads an asset of a tenant the caller holds.
func (s *assetService) get(ctx context.Context, tenant, id string) (*luciusv1.Asset, error) {
	tenant = routing.Normalize(tenant)
	if err := s.held(ctx, tenant, id); err != nil {
		return nil, err
	}
	a, err := s.store.GetAsset(ctx, tenant, id)
	if err != nil {
		return nil, s.error(ctx, err, id)
	}
	return assetToProto(a), nil
}

// error maps ledger errors to API statuses through apiError, naming the asset.
func (s *assetService) error(ctx context.Context, err error, id string) error {
	return apiError(ctx, s.log, "ledger", "assets", err,
		&apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_ASSET_NOT_FOUND, Message: "asset " + id + " not found", Metadata: []string{"asset_id", id}},
		"asset_id", id)
}

func assetToProto(a *ledger.Asset) *luciusv1.Asset {
	return &luciusv1.Asset{AssetId: a.AssetID, TenantId: a.TenantID, PlatformId: a.PlatformID, PlatformRefs: a.PlatformRefs,
		Revisions: int32(a.Revisions), CurrentRevision: int32(a.CurrentRevision), CurrentJobId: a.CurrentJobID,
		ContentHash: a.ContentHash, ProcessingStatus: jobStatusToProto(a.ProcessingStatus), CreatedBy: a.CreatedBy,
		CreateTime: ts(a.CreatedAt), UpdateTime: ts(a.UpdatedAt), DeleteTime: ts(a.DeletedAt), DeletedBy: a.DeletedBy,
		ApprovalState: luciusv1.ApprovalState(luciusv1.ApprovalState_value["APPROVAL_STATE_"+a.ApprovalState]),
		ApprovalNote:  a.ApprovalNote, ApprovalUpdatedBy: a.ApprovalUpdatedBy, ApprovalUpdateTime: ts(a.ApprovalUpdatedAt)}
}
