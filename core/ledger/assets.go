package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/jackc/pgx/v5"
)

// AssetIDOf is the id of the asset a platform's identifiers name:
// hex(SHA-256(platform_id | canonical platform_refs))[:32], the refs in RFC
// 8785 canonical JSON: compact, sorted keys, no HTML escaping (for the
// ASCII and BMP text ids are made of, what json.dumps(refs, sort_keys=True,
// separators=(",", ":"), ensure_ascii=False) writes). External ids never
// become keys themselves.
func AssetIDOf(platformID string, platformRefs map[string]string) string {
	if platformRefs == nil {
		platformRefs = map[string]string{}
	}
	// Compact JSON with sorted keys (seed 001), made exact by RFC 8785 (JCS):
	// key order by UTF-16 code units, minimal escapes.
	raw, _ := json.Marshal(platformRefs) // strings cannot fail
	canonical, err := jcs.Transform(raw)
	if err != nil {
		panic("ledger: canonical platform_refs: " + err.Error()) // json.Marshal's output is JSON
	}
	sum := sha256.Sum256([]byte(platformID + "|" + string(canonical)))
	return hex.EncodeToString(sum[:])[:32]
}

// ErrAssetDeleted means: a command names a soft-deleted asset.
var ErrAssetDeleted = errors.New("the asset is deleted")

// ErrRevisionNotSucceeded means: a rollback names a revision that did not succeed.
var ErrRevisionNotSucceeded = errors.New("the revision did not succeed")

// AssetRef is the asset a request names (empty AssetID: none).
type AssetRef struct {
	AssetID      string
	PlatformID   string
	PlatformRefs map[string]string
}

// Asset is a partner platform's thing, processed in revisions.
type Asset struct {
	TenantID, AssetID, PlatformID   string
	PlatformRefs                    map[string]string
	Revisions, CurrentRevision      int
	CurrentJobID, ContentHash       string
	ProcessingStatus                JobStatus
	CreatedBy, DeletedBy            string
	CreatedAt, UpdatedAt, DeletedAt time.Time
	// The platform's review (ApprovalPending, ApprovalApproved, ApprovalRejected).
	ApprovalState, ApprovalNote, ApprovalUpdatedBy string
	ApprovalUpdatedAt                              time.Time
}

// Approval states of an asset.
const (
	ApprovalPending  = "PENDING"
	ApprovalApproved = "APPROVED"
	ApprovalRejected = "REJECTED"
)

// AssetRevision is one processing of an asset by a job.
type AssetRevision struct {
	Revision    int
	JobID       string
	Status      JobStatus
	ContentHash string
	Current     bool
	CreatedAt   time.Time
	CompletedAt time.Time
}

const (
	// sqlAddRevision creates the asset or counts one more revision of it
	// (not of a deleted one: no row), and links the job to that revision.
	sqlAddRevision = `WITH a AS (
		INSERT INTO assets (tenant_id, asset_id, platform_id, platform_refs, revisions, created_by)
		VALUES ($1, $2, $3, $4, 1, $5)
		ON CONFLICT (tenant_id, asset_id) DO UPDATE SET revisions = assets.revisions + 1,
			processing_status = 'RECEIVED', updated_at = now()
		WHERE assets.deleted_at IS NULL
		RETURNING revisions)
	INSERT INTO asset_revisions (tenant_id, asset_id, revision, job_id)
	SELECT $1, $2, revisions, $6 FROM a RETURNING revision`

	// sqlFinishRevision records a job's end on its revision; a success of the
	// newest revision so far becomes current, and the asset's processing
	// status follows its newest revision. Nothing for a job without an asset.
	sqlFinishRevision = `WITH r AS (
		UPDATE asset_revisions SET status = $2, content_hash = $3, completed_at = now()
		WHERE job_id = $1 RETURNING tenant_id, asset_id, revision)
	UPDATE assets a SET
		current_revision = CASE WHEN $2 = 'SUCCEEDED' AND r.revision > a.current_revision THEN r.revision ELSE a.current_revision END,
		current_job_id = CASE WHEN $2 = 'SUCCEEDED' AND r.revision > a.current_revision THEN $1 ELSE a.current_job_id END,
		content_hash = CASE WHEN $2 = 'SUCCEEDED' AND r.revision > a.current_revision THEN $3 ELSE a.content_hash END,
		processing_status = CASE WHEN r.revision = a.revisions THEN $2 ELSE a.processing_status END,
		updated_at = now()
	FROM r WHERE a.tenant_id = r.tenant_id AND a.asset_id = r.asset_id`

	assetColumns = `tenant_id, asset_id, platform_id, platform_refs, revisions, current_revision, current_job_id,
	content_hash, processing_status, created_by, created_at, updated_at, deleted_at, deleted_by,
	approval_state, approval_note, approval_updated_by, approval_updated_at`

	sqlGetAsset = `SELECT ` + assetColumns + ` FROM assets WHERE tenant_id = $1 AND asset_id = $2`

	sqlAssetRevisions = `SELECT r.revision, r.job_id, r.status, r.content_hash, r.revision = a.current_revision,
		r.created_at, r.completed_at
	FROM asset_revisions r JOIN assets a USING (tenant_id, asset_id)
	WHERE r.tenant_id = $1 AND r.asset_id = $2 AND ($3 = 0 OR r.revision < $3)
	ORDER BY r.revision DESC LIMIT $4`

	sqlRollbackAsset = `UPDATE assets a SET current_revision = r.revision, current_job_id = r.job_id,
		content_hash = r.content_hash, updated_at = now()
	FROM asset_revisions r
	WHERE a.tenant_id = $1 AND a.asset_id = $2 AND r.tenant_id = a.tenant_id AND r.asset_id = a.asset_id
	  AND r.revision = $3 AND r.status = 'SUCCEEDED'
	RETURNING a.asset_id`

	sqlDeleteAsset = `UPDATE assets SET deleted_at = coalesce(deleted_at, now()),
		deleted_by = CASE WHEN deleted_at IS NULL THEN $3 ELSE deleted_by END, updated_at = now()
	WHERE tenant_id = $1 AND asset_id = $2`
)

// addRevision links a new request to the next revision of its asset,
// creating the asset with the first. ErrAssetDeleted for a deleted asset.
func (t *Tx) addRevision(ctx context.Context, r Request) (int, error) {
	refs, err := json.Marshal(r.Asset.PlatformRefs)
	if err != nil {
		return 0, err
	}
	var revision int
	err = t.tx.QueryRow(ctx, sqlAddRevision, r.TenantID, r.Asset.AssetID, r.Asset.PlatformID, refs, r.Principal, r.JobID).
		Scan(&revision)
	if isNoRows(err) {
		return 0, fmt.Errorf("asset %s: %w", r.Asset.AssetID, ErrAssetDeleted)
	}
	if err != nil {
		return 0, fmt.Errorf("asset %s: revision: %w", r.Asset.AssetID, err)
	}
	return revision, nil
}

// FinishRevision records how a job ended on its asset revision, if it has
// one (see sqlFinishRevision); contentHash is the final step's.
func (t *Tx) FinishRevision(ctx context.Context, jobID string, status JobStatus, contentHash string) error {
	t.tx.hold(fmt.Sprintf("finish revision of %s", jobID), sqlFinishRevision, jobID, string(status), contentHash)
	return nil
}

// GetAsset returns a tenant's asset; ErrNotFound when it has none by that id.
func (s *Store) GetAsset(ctx context.Context, tenantID, assetID string) (*Asset, error) {
	return scanAsset(s.pool.QueryRow(ctx, sqlGetAsset, tenantID, assetID), assetID)
}

func scanAsset(row pgx.Row, assetID string) (*Asset, error) {
	var a Asset
	var refs []byte
	var deleted, approved *time.Time
	var status string
	err := row.Scan(&a.TenantID, &a.AssetID, &a.PlatformID, &refs, &a.Revisions, &a.CurrentRevision, &a.CurrentJobID,
		&a.ContentHash, &status, &a.CreatedBy, &a.CreatedAt, &a.UpdatedAt, &deleted, &a.DeletedBy,
		&a.ApprovalState, &a.ApprovalNote, &a.ApprovalUpdatedBy, &approved)
	if isNoRows(err) {
		return nil, fmt.Errorf("asset %s: %w", assetID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("asset %s: %w", assetID, err)
	}
	a.ProcessingStatus, a.DeletedAt, a.ApprovalUpdatedAt = JobStatus(status), derefTime(deleted), derefTime(approved)
	if err := json.Unmarshal(refs, &a.PlatformRefs); err != nil {
		return nil, fmt.Errorf("asset %s: platform_refs: %w", assetID, err)
	}
	return &a, nil
}

// AssetRevisions lists up to limit of an asset's revisions, newest first,
// those before revision before (0: from the newest).
func (s *Store) AssetRevisions(ctx context.Context, tenantID, assetID string, before, limit int) ([]AssetRevision, error) {
	rows, err := s.pool.Query(ctx, sqlAssetRevisions, tenantID, assetID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("asset %s: revisions: %w", assetID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AssetRevision, error) {
		var r AssetRevision
		var status string
		var completed *time.Time
		err := row.Scan(&r.Revision, &r.JobID, &status, &r.ContentHash, &r.Current, &r.CreatedAt, &completed)
		r.Status, r.CompletedAt = JobStatus(status), derefTime(completed)
		return r, err
	})
}

// RollbackAsset makes a succeeded revision current again. ErrNotFound for
// no such asset or revision, ErrRevisionNotSucceeded for one that did not
// succeed.
func (s *Store) RollbackAsset(ctx context.Context, tenantID, assetID string, revision int) (*Asset, error) {
	var id string
	err := s.pool.QueryRow(ctx, sqlRollbackAsset, tenantID, assetID, revision).Scan(&id)
	if isNoRows(err) {
		revs, lerr := s.AssetRevisions(ctx, tenantID, assetID, revision+1, 1)
		if lerr != nil {
			return nil, lerr
		}
		if len(revs) == 1 && revs[0].Revision == revision {
			return nil, fmt.Errorf("asset %s revision %d is %s: %w", assetID, revision, revs[0].Status, ErrRevisionNotSucceeded)
		}
		return nil, fmt.Errorf("asset %s revision %d: %w", assetID, revision, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("asset %s: rollback: %w", assetID, err)
	}
	return s.GetAsset(ctx, tenantID, assetID)
}

// DeleteAsset soft-deletes an asset (again: nothing changes).
func (s *Store) DeleteAsset(ctx context.Context, tenantID, assetID, by string) (*Asset, error) {
	tag, err := s.pool.Exec(ctx, sqlDeleteAsset, tenantID, assetID, by)
	if err != nil {
		return nil, fmt.Errorf("asset %s: delete: %w", assetID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil, fmt.Errorf("asset %s: %w", assetID, ErrNotFound)
	}
	return s.GetAsset(ctx, tenantID, assetID)
}

// SetAssetApproval records the platform's review of an asset. ErrNotFound
// for no such asset, ErrAssetDeleted for a deleted one.
func (s *Store) SetAssetApproval(ctx context.Context, tenantID, assetID, state, note, by string) (*Asset, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE assets SET approval_state = $3, approval_note = $4, approval_updated_by = $5,
		approval_updated_at = now(), updated_at = now()
	WHERE tenant_id = $1 AND asset_id = $2 AND deleted_at IS NULL`, tenantID, assetID, state, note, by)
	if err != nil {
		return nil, fmt.Errorf("asset %s: approval: %w", assetID, err)
	}
	if tag.RowsAffected() == 1 {
		return s.GetAsset(ctx, tenantID, assetID)
	}
	a, err := s.GetAsset(ctx, tenantID, assetID)
	if err != nil {
		return nil, err
	}
	return a, fmt.Errorf("asset %s: %w", a.AssetID, ErrAssetDeleted)
}
