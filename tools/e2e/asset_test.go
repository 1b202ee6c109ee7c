package e2e

import (
	"net/http"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// An asset processed and then reprocessed twice has one asset id and
// revisions 1-3, each its own job; the newest success is current, and a
// rollback makes revision 2 current again without running anything.
func TestAnAssetReprocessedTwiceHasThreeRevisionsAndRollsBack(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	in := s.input("boundaries.txt", "World boundaries, edition five.\n")
	var assetID string
	var jobs []string
	for i, key := range []string{"first", "reprocess-1", "reprocess-2"} {
		out, _ := s.output("boundaries-" + key + ".txt")
		code, sub := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "OCR", "schema_version": "1",
			"input_ref": in, "output_ref": out, "payload": map[string]any{}, "idempotency_key": key,
			"platform_id": "ddh", "platform_refs": map[string]any{"dataset_id": "boundaries", "resource_id": "shapefile", "version_id": "2025-01"}})
		if code != http.StatusAccepted || sub["asset_revision"] != float64(i+1) || (assetID != "" && sub["asset_id"] != assetID) {
			t.Fatalf("submit %s: %d %v", key, code, sub)
		}
		assetID = sub["asset_id"].(string)
		jobs = append(jobs, sub["job_id"].(string))
		if job := s.waitJob(jobs[i], 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED ||
			job.GetAssetId() != assetID || job.GetAssetRevision() != int32(i+1) {
			t.Fatalf("job of revision %d ended %s (asset %s revision %d)", i+1, job.GetStatus(), job.GetAssetId(), job.GetAssetRevision())
		}
	}
	code, got := s.rest("GET", "/v1/assets/"+assetID+"?tenant_id=acme", nil)
	a, _ := got["asset"].(map[string]any)
	if code != http.StatusOK || a["revisions"] != float64(3) || a["current_revision"] != float64(3) || a["current_job_id"] != jobs[2] ||
		a["processing_status"] != "JOB_STATUS_SUCCEEDED" || a["content_hash"] == nil {
		t.Fatalf("asset after three runs: %d %v", code, got)
	}
	code, list := s.rest("GET", "/v1/assets/"+assetID+"/revisions?tenant_id=acme", nil)
	revs, _ := list["revisions"].([]any)
	if code != http.StatusOK || len(revs) != 3 {
		t.Fatalf("revisions: %d %v", code, list)
	}
	for i, r := range revs {
		rev := r.(map[string]any)
		if rev["revision"] != float64(3-i) || rev["job_id"] != jobs[2-i] || rev["status"] != "JOB_STATUS_SUCCEEDED" {
			t.Fatalf("revision %d: %v", 3-i, rev)
		}
	}
	attempts := s.count(`SELECT count(*) FROM attempts`)
	code, rolled := s.rest("POST", "/v1/assets/"+assetID+":rollback", map[string]any{"tenant_id": "acme", "revision": 2})
	if a := rolled["asset"].(map[string]any); code != http.StatusOK || a["current_revision"] != float64(2) || a["current_job_id"] != jobs[1] {
		t.Fatalf("rollback: %d %v", code, rolled)
	}
	if n := s.count(`SELECT count(*) FROM attempts`); n != attempts {
		t.Fatalf("the rollback ran work: %d attempts, then %d", attempts, n)
	}
}
