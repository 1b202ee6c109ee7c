package engine_test

import (
	"testing"

	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// A job's end is recorded on its asset revision: a success becomes the
// asset's current revision with its content hash, and the asset's processing
// status follows its newest revision, a failure included.
func TestJobEndsRecordTheirAssetRevision(t *testing.T) {
	t.Parallel()
	f := setup(t)
	refs := map[string]string{"dataset_id": "d1"}
	asset := ledger.AssetRef{AssetID: ledger.AssetIDOf("ddh", refs), PlatformID: "ddh", PlatformRefs: refs}
	submit := func(revision int) *ledger.Job {
		t.Helper()
		q, req, msg, err := f.request("Acme", "OCR", map[string]any{}, "")
		if err != nil {
			t.Fatal(err)
		}
		req.Asset = asset
		acc, err := f.store.Accept(f.ctx, req, msg, ledger.Limits{})
		if err != nil || acc.AssetRevision != revision {
			t.Fatalf("accept: revision %d (%v), want %d", acc.AssetRevision, err, revision)
		}
		return f.create(q)
	}
	first := submit(1)
	s := f.current(first.JobID)
	f.ack(s)
	if r := f.succeed(s); r.JobStatus != ledger.JobSucceeded {
		t.Fatalf("first job %s", r.JobStatus)
	}
	second := submit(2)
	s = f.current(second.JobID)
	f.ack(s)
	if r := f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, false); r.JobStatus != ledger.JobFailedFinal {
		t.Fatalf("second job %s", r.JobStatus)
	}

	a, err := f.store.GetAsset(f.ctx, "acme", asset.AssetID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Revisions != 2 || a.CurrentRevision != 1 || a.CurrentJobID != first.JobID || len(a.ContentHash) != 64 ||
		a.ProcessingStatus != ledger.JobFailedFinal {
		t.Fatalf("asset %+v: want 2 revisions, revision 1 current with a content hash, processing status FAILED_FINAL", a)
	}
	revs, err := f.store.AssetRevisions(f.ctx, "acme", asset.AssetID, 0, 10)
	if err != nil || len(revs) != 2 {
		t.Fatalf("revisions %+v (%v)", revs, err)
	}
	if r := revs[0]; r.Revision != 2 || r.Status != ledger.JobFailedFinal || r.Current || r.CompletedAt.IsZero() {
		t.Errorf("revision 2 %+v", r)
	}
	if r := revs[1]; r.Revision != 1 || r.Status != ledger.JobSucceeded || !r.Current || r.ContentHash != a.ContentHash {
		t.Errorf("revision 1 %+v", r)
	}
	if j := f.job(second.JobID); j.AssetID != asset.AssetID || j.AssetRevision != 2 {
		t.Errorf("job of revision 2 reads asset %q revision %d", j.AssetID, j.AssetRevision)
	}
}
