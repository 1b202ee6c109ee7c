package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// assetBody is a command naming seed 001's example asset.
func assetBody(key string) map[string]any {
	b := validBody(key)
	b["platform_id"] = "ddh"
	b["platform_refs"] = map[string]any{"dataset_id": "boundaries", "resource_id": "shapefile", "version_id": "2025-01"}
	return b
}

// Commands naming the same platform identifiers are revisions of one asset:
// the first creates it, each new job adds a revision, a repeated command adds
// none. The asset is read by id or by its identifiers, tenant-scoped; a
// succeeded revision can be made current again; a deleted asset takes no
// new revisions.
func TestCommandsNamingAnAssetAddRevisions(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	partner := f.issuer.Token(t, authtest.Partner("acme"))
	wantID := ledger.AssetIDOf("ddh", map[string]string{"dataset_id": "boundaries", "resource_id": "shapefile", "version_id": "2025-01"})
	var jobs []string
	for i, key := range []string{"r1", "r2", "r3", "r3"} {
		code, _, sub := f.restAs(t, partner, "POST", "/v1/commands", assetBody(key))
		want := float64(min(i+1, 3)) // the repeat of r3 is revision 3 again
		if code != http.StatusAccepted || sub["asset_id"] != wantID || sub["asset_revision"] != want {
			t.Fatalf("submit %s: %d %v, want asset %s revision %v", key, code, sub, wantID, want)
		}
		if i < 3 {
			jobs = append(jobs, sub["job_id"].(string))
		}
	}
	code, _, job := f.restAs(t, partner, "GET", "/v1/jobs/"+jobs[1], nil)
	if j := job["job"].(map[string]any); code != http.StatusOK || j["asset_id"] != wantID || j["asset_revision"] != float64(2) {
		t.Fatalf("job of revision 2: %d %v", code, job)
	}

	code, _, got := f.restAs(t, partner, "GET", "/v1/assets/"+wantID+"?tenant_id=acme", nil)
	a, _ := got["asset"].(map[string]any)
	if code != http.StatusOK || a["revisions"] != float64(3) || a["platform_id"] != "ddh" ||
		a["platform_refs"].(map[string]any)["version_id"] != "2025-01" || a["current_revision"] != nil {
		t.Fatalf("get asset: %d %v", code, got)
	}
	code, _, found := f.restAs(t, partner, "POST", "/v1/assets:lookup", map[string]any{"tenant_id": "acme", "platform_id": "ddh",
		"platform_refs": map[string]any{"version_id": "2025-01", "resource_id": "shapefile", "dataset_id": "boundaries"}})
	if code != http.StatusOK || found["asset"].(map[string]any)["asset_id"] != wantID {
		t.Fatalf("lookup: %d %v", code, found)
	}
	other := f.issuer.Token(t, authtest.Partner("globex"))
	for _, path := range []string{"/v1/assets/" + wantID + "?tenant_id=acme", "/v1/assets/" + wantID + "?tenant_id=globex"} {
		if code, _, body := f.restAs(t, other, "GET", path, nil); code != http.StatusNotFound || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_ASSET_NOT_FOUND) {
			t.Fatalf("another tenant reads %s: %d %v", path, code, body)
		}
	}

	for _, call := range []struct{ token, method, path string }{
		{other, "POST", "/v1/assets/" + wantID + ":rollback"}, {other, "DELETE", "/v1/assets/" + wantID + "?tenant_id=acme"},
		{partner, "POST", "/v1/assets/" + strings.Repeat("0", 32) + ":rollback"},
		{partner, "DELETE", "/v1/assets/" + strings.Repeat("0", 32) + "?tenant_id=acme"},
	} {
		var body any
		if call.method == "POST" {
			body = map[string]any{"tenant_id": "acme", "revision": 1}
		}
		if code, _, got := f.restAs(t, call.token, call.method, call.path, body); code != http.StatusNotFound || reasonOf(got) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_ASSET_NOT_FOUND) {
			t.Fatalf("%s %s by %s: %d %v, want 404 ASSET_NOT_FOUND", call.method, call.path, map[bool]string{true: "the owner", false: "another tenant"}[call.token == partner], code, got)
		}
	}

	code, _, list := f.restAs(t, partner, "GET", "/v1/assets/"+wantID+"/revisions?tenant_id=acme", nil)
	revs, _ := list["revisions"].([]any)
	if code != http.StatusOK || len(revs) != 3 || revs[0].(map[string]any)["revision"] != float64(3) || revs[2].(map[string]any)["job_id"] != jobs[0] {
		t.Fatalf("revisions: %d %v", code, list)
	}
	code, _, page := f.restAs(t, partner, "GET", "/v1/assets/"+wantID+"/revisions?tenant_id=acme&page_size=2", nil)
	token, _ := page["next_page_token"].(string)
	if code != http.StatusOK || len(page["revisions"].([]any)) != 2 || token == "" {
		t.Fatalf("first page: %d %v", code, page)
	}
	code, _, rest := f.restAs(t, partner, "GET", "/v1/assets/"+wantID+"/revisions?tenant_id=acme&page_size=2&page_token="+token, nil)
	if last, _ := rest["revisions"].([]any); code != http.StatusOK || len(last) != 1 || last[0].(map[string]any)["revision"] != float64(1) ||
		rest["next_page_token"] != nil {
		t.Fatalf("second page: %d %v", code, rest)
	}
	// No job ran here: no revision succeeded, so none can become current.
	rollback := map[string]any{"tenant_id": "acme", "revision": 2}
	if code, _, body := f.restAs(t, partner, "POST", "/v1/assets/"+wantID+":rollback", rollback); code != http.StatusBadRequest ||
		reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_REVISION_NOT_SUCCEEDED) {
		t.Fatalf("rollback to a revision that did not succeed: %d %v", code, body)
	}
	// What the orchestrator records when revisions 2 and 3 succeed.
	for _, j := range jobs[1:] {
		if _, err := f.pool.Exec(f.ctx, `WITH r AS (UPDATE asset_revisions SET status = 'SUCCEEDED', content_hash = 'h-'||job_id, completed_at = now()
			WHERE job_id = $1 RETURNING tenant_id, asset_id, revision, job_id)
			UPDATE assets a SET current_revision = r.revision, current_job_id = r.job_id FROM r
			WHERE a.tenant_id = r.tenant_id AND a.asset_id = r.asset_id`, j); err != nil {
			t.Fatal(err)
		}
	}
	code, _, rolled := f.restAs(t, partner, "POST", "/v1/assets/"+wantID+":rollback", rollback)
	if a := rolled["asset"].(map[string]any); code != http.StatusOK || a["current_revision"] != float64(2) || a["current_job_id"] != jobs[1] ||
		a["content_hash"] != "h-"+jobs[1] {
		t.Fatalf("rollback to revision 2: %d %v", code, rolled)
	}

	// The platform's review: PENDING until it says otherwise; only it changes it.
	if a["approval_state"] != "APPROVAL_STATE_PENDING" {
		t.Fatalf("a new asset's approval: %v", a["approval_state"])
	}
	approve := map[string]any{"tenant_id": "acme", "approval_state": "APPROVAL_STATE_APPROVED", "note": "metadata checked"}
	code, _, approved := f.restAs(t, partner, "POST", "/v1/assets/"+wantID+":setApproval", approve)
	if a := approved["asset"].(map[string]any); code != http.StatusOK || a["approval_state"] != "APPROVAL_STATE_APPROVED" ||
		a["approval_note"] != "metadata checked" || a["approval_updated_by"] == "" || a["approval_update_time"] == nil ||
		a["current_revision"] != float64(2) {
		t.Fatalf("approve: %d %v", code, approved)
	}
	for _, bad := range []map[string]any{
		{"tenant_id": "acme", "approval_state": "APPROVAL_STATE_UNSPECIFIED"},
		{"tenant_id": "acme", "approval_state": 9},
	} {
		if code, _, body := f.restAs(t, partner, "POST", "/v1/assets/"+wantID+":setApproval", bad); code != http.StatusBadRequest ||
			!hasFieldViolation(body, "approval_state") {
			t.Fatalf("approval %v: %d %v", bad["approval_state"], code, body)
		}
	}
	if code, _, body := f.restAs(t, other, "POST", "/v1/assets/"+wantID+":setApproval", approve); code != http.StatusNotFound {
		t.Fatalf("another tenant's approval: %d %v", code, body)
	}

	code, _, deleted := f.restAs(t, partner, "DELETE", "/v1/assets/"+wantID+"?tenant_id=acme", nil)
	if code != http.StatusOK || deleted["asset"].(map[string]any)["delete_time"] == nil {
		t.Fatalf("delete: %d %v", code, deleted)
	}
	requests := f.count(t, "requests")
	if code, _, body := f.restAs(t, partner, "POST", "/v1/commands", assetBody("r4")); code != http.StatusBadRequest ||
		reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_ASSET_DELETED) {
		t.Fatalf("a command naming a deleted asset: %d %v", code, body)
	}
	if n := f.count(t, "requests"); n != requests {
		t.Fatalf("a refused command stored a request (%d, then %d)", requests, n)
	}
	if code, _, body := f.restAs(t, partner, "POST", "/v1/assets/"+wantID+":setApproval", approve); code != http.StatusBadRequest ||
		reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_ASSET_DELETED) {
		t.Fatalf("approving a deleted asset: %d %v", code, body)
	}
	if code, _, body := f.restAs(t, partner, "POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "OCR",
		"schema_version": "1", "input_ref": "file:///data/in.txt", "output_ref": "file:///data/out.txt", "payload": map[string]any{},
		"platform_refs": map[string]any{"dataset_id": "x"}}); code != http.StatusBadRequest {
		t.Fatalf("platform_refs without platform_id: %d %v", code, body)
	}
}
