package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// restHeader is rest with the response headers, as an operator.
func (f *gatewayFixture) restHeader(t *testing.T, method, path string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	return f.restAs(t, f.operator, method, path, body)
}

// restAs calls REST with token (none when empty).
func (f *gatewayFixture) restAs(t *testing.T, token, method, path string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, f.base+path, r)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

func TestConfigServiceAndAdmissionLimitsOverREST(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	code, g := f.rest(t, "GET", "/v1/config/global", nil)
	global, _ := g["config"].(map[string]any)
	if code != http.StatusOK || global["default_mode"] != "MODE_DEFAULT" || global["revision"] == nil {
		t.Fatalf("seeded global: %d %v", code, g)
	}
	rev := global["revision"].(string)
	code, g = f.rest(t, "PUT", "/v1/config/global", map[string]any{"default_mode": "MODE_DEFAULT", "revision": rev,
		"retry_after_seconds": 3, "limits": map[string]any{"tenant_max_active_jobs": 2}, "retention_days": 30,
		"ref_policy": map[string]any{"schemes": []string{"file", "https", "az"}}})
	if code != http.StatusOK {
		t.Fatalf("update global: %d %v", code, g)
	}
	if code, stale := f.rest(t, "PUT", "/v1/config/global", map[string]any{"revision": rev}); code != http.StatusConflict ||
		reasonOf(stale) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_CONFIG_REVISION_MISMATCH) {
		t.Fatalf("update with a stale revision: %d %v", code, stale)
	}
	invalid := []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"mode": "MODE_DEFAULT", "allowed_modes": []string{"MODE_BURST"}}, "config.mode"},
		{map[string]any{"ref_policy": map[string]any{"schemes": []string{"FTP!"}}}, "config.ref_policy.schemes[0]"},
		{map[string]any{"max_active_jobs": -1}, "config.max_active_jobs"},
		{map[string]any{"allowed_modes": []string{"MODE_UNSPECIFIED"}}, "config.allowed_modes[0]"},
		{map[string]any{"retention_days": -1}, "config.retention_days"},
	}
	for _, tt := range invalid {
		if code, body := f.rest(t, "PUT", "/v1/config/tenants/acme", tt.body); code != http.StatusBadRequest || !hasFieldViolation(body, tt.field) {
			t.Fatalf("invalid tenant config %v: %d %v", tt.body, code, body)
		}
	}

	// The tenant limit of 2 from the globals: the third submit is refused and writes nothing.
	for i, want := range []int{http.StatusAccepted, http.StatusAccepted} {
		if code, body := f.rest(t, "POST", "/v1/commands", validBody(string(rune('a'+i)))); code != want {
			t.Fatalf("submit %d: %d %v", i, code, body)
		}
	}
	code, header, refused := f.restHeader(t, "POST", "/v1/commands", validBody("c"))
	if code != http.StatusTooManyRequests || header.Get("Retry-After") != "3" || reasonOf(refused) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_LIMIT_REACHED) {
		t.Fatalf("over the limit: %d Retry-After %q %v", code, header.Get("Retry-After"), refused)
	}
	if n := f.count(t, "requests"); n != 2 {
		t.Fatalf("%d requests stored, want 2", n)
	}
	// A duplicate of an accepted command is not a new job: answered, not refused.
	if code, body := f.rest(t, "POST", "/v1/commands", validBody("a")); code != http.StatusAccepted || body["duplicate"] != true {
		t.Fatalf("duplicate at the limit: %d %v", code, body)
	}

	// Raising the tenant's own limit applies at once.
	code, tc := f.rest(t, "PUT", "/v1/config/tenants/%20ACME", map[string]any{"max_active_jobs": 3, "retention_days": 0,
		"ref_policy": map[string]any{"schemes": []string{"file"}, "containers": []string{"data"}}})
	if code != http.StatusOK || tc["config"].(map[string]any)["tenant_id"] != "acme" {
		t.Fatalf("update tenant: %d %v", code, tc)
	}
	if code, body := f.rest(t, "POST", "/v1/commands", validBody("c")); code != http.StatusAccepted {
		t.Fatalf("submit under the raised limit: %d %v", code, body)
	}
	outside := validBody("d")
	outside["input_ref"] = "file:///elsewhere/in.txt"
	if code, body := f.rest(t, "POST", "/v1/commands", outside); code != http.StatusBadRequest || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED) {
		t.Fatalf("ref outside the tenant's containers: %d %v", code, body)
	}
	code, got := f.rest(t, "GET", "/v1/config/tenants/acme", nil)
	eff, _ := got["effective"].(map[string]any)
	if code != http.StatusOK || eff["max_active_jobs"] != float64(3) || eff["mode"] != "MODE_DEFAULT" || eff["mode_source"] != "GLOBAL_CONFIG" {
		t.Fatalf("get tenant: %d %v", code, got)
	}
	// retention_days 0 is the tenant's own "forever", not "inherit the global 30".
	if own := got["config"].(map[string]any); own["retention_days"] != float64(0) || eff["retention_days"] != nil {
		t.Fatalf("tenant retention: config %v, effective %v", own["retention_days"], eff["retention_days"])
	}
	f.rest(t, "PUT", "/v1/config/tenants/beta", map[string]any{"mode": "MODE_BURST"})
	code, inherit := f.rest(t, "GET", "/v1/config/tenants/beta", nil)
	if e, _ := inherit["effective"].(map[string]any); code != http.StatusOK || e["retention_days"] != float64(30) {
		t.Fatalf("a tenant without its own retention inherits the global one: %d %v", code, inherit)
	}
	code, page := f.rest(t, "GET", "/v1/config/tenants?page_size=1", nil)
	configs, _ := page["configs"].([]any)
	if code != http.StatusOK || len(configs) != 1 || page["next_page_token"] == nil {
		t.Fatalf("first page: %d %v", code, page)
	}
	code, page = f.rest(t, "GET", "/v1/config/tenants?page_size=1&page_token="+page["next_page_token"].(string), nil)
	if configs, _ = page["configs"].([]any); code != http.StatusOK || len(configs) != 1 || configs[0].(map[string]any)["tenant_id"] != "beta" {
		t.Fatalf("second page: %d %v", code, page)
	}
	if code, body := f.rest(t, "DELETE", "/v1/config/tenants/acme", nil); code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, body)
	}
	if code, body := f.rest(t, "GET", "/v1/config/tenants/acme", nil); code != http.StatusNotFound || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_CONFIG_NOT_FOUND) {
		t.Fatalf("deleted tenant: %d %v", code, body)
	}
	if code, header, _ := f.restHeader(t, "POST", "/v1/commands", validBody("e")); code != http.StatusTooManyRequests || header.Get("Retry-After") == "" {
		t.Fatalf("back on the global tenant limit: %d", code)
	}
}

// Webhook secrets and request rates are part of a tenant's configuration:
// stored through UpdateTenantConfig and read back whole by GetTenantConfig;
// malformed ones are refused with a field violation.
func TestTenantConfigRoundTripsWebhookSecretsAndRates(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	in := map[string]any{
		"webhook_secrets": []string{testWebhookSecret, "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="},
		"request_rate":    map[string]any{"requests_per_second": 2.5, "burst": 5},
		"key_rate_limits": []any{map[string]any{"field": "doc_id", "rate": map[string]any{"requests_per_second": 0.2}},
			map[string]any{"field": "payload.scene", "rate": map[string]any{"requests_per_second": 1, "burst": 3}}},
	}
	if code, body := f.rest(t, "PUT", "/v1/config/tenants/acme", in); code != http.StatusOK {
		t.Fatalf("update: %d %v", code, body)
	}
	code, got := f.rest(t, "GET", "/v1/config/tenants/acme", nil)
	cfg, _ := got["config"].(map[string]any)
	want, _ := json.Marshal(in)
	var wantMap map[string]any
	_ = json.Unmarshal(want, &wantMap)
	for _, field := range []string{"webhook_secrets", "request_rate", "key_rate_limits"} {
		a, _ := json.Marshal(cfg[field])
		b, _ := json.Marshal(wantMap[field])
		if code != http.StatusOK || !bytes.Equal(a, b) {
			t.Errorf("%s read back %s, want %s (%d)", field, a, b, code)
		}
	}
	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"webhook_secrets": []string{"not-a-secret"}}, "config.webhook_secrets[0]"},
		{map[string]any{"request_rate": map[string]any{"requests_per_second": 0}}, "config.request_rate.requests_per_second"},
		{map[string]any{"key_rate_limits": []any{map[string]any{"field": "tenant_id", "rate": map[string]any{"requests_per_second": 1}}}},
			"config.key_rate_limits[0].field"},
	} {
		if code, body := f.rest(t, "PUT", "/v1/config/tenants/acme", bad.body); code != http.StatusBadRequest || !hasFieldViolation(body, bad.field) {
			t.Errorf("invalid %v: %d %v, want 400 naming %s", bad.body, code, body, bad.field)
		}
	}
}
