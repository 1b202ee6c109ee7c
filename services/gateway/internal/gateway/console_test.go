package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// bareConn is a connection without credentials: each call brings its own.
func (f *gatewayFixture) bareConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := server.Dial(f.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// consoleSession logs in through a ticket minted with g's own token, checks
// the ticket works once, and returns the session cookie and its CSRF token.
func (f *gatewayFixture) consoleSession(t *testing.T, g auth.Grant, jobID string) (*http.Cookie, string) {
	t.Helper()
	client := luciusv1.NewConsoleServiceClient(f.bareConn(t))
	resp, err := client.CreateConsoleTicket(f.issuer.Context(t, f.ctx, g), &luciusv1.CreateConsoleTicketRequest{JobId: jobID})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.GetLoginUrl())
	if err != nil || u.Scheme+"://"+u.Host != f.base || u.Path != "/ui/login" || u.Query().Get("ticket") != resp.GetTicket() {
		t.Fatalf("login URL %q (base %s): %v", resp.GetLoginUrl(), f.base, err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := noRedirect.Get(resp.GetLoginUrl())
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	want := "/ui/jobs"
	if jobID != "" {
		want += "/" + jobID
	}
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != want {
		t.Fatalf("login: %d to %q, want %s", r.StatusCode, r.Header.Get("Location"), want)
	}
	again, err := noRedirect.Get(resp.GetLoginUrl())
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a used ticket answered %d", again.StatusCode)
	}
	var cookie *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == "lucius_session" {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("no session cookie")
	}
	req, _ := http.NewRequest("GET", f.base+"/ui/session", nil)
	req.AddCookie(cookie)
	sr, err := f.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Body.Close()
	var info struct {
		CSRFToken string `json:"csrf_token"`
	}
	if err := json.NewDecoder(sr.Body).Decode(&info); err != nil || info.CSRFToken == "" {
		t.Fatalf("session info: %v", err)
	}
	return cookie, info.CSRFToken
}

// withCookie calls REST with the session cookie (and csrf, when set) only.
func (f *gatewayFixture) withCookie(t *testing.T, cookie *http.Cookie, csrf, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, f.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(cookie)
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := f.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestConsoleSessionActsAsItsPrincipalOnly(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	var acmeJob, globexJob string
	for tenant, id := range map[string]*string{"acme": &acmeJob, "globex": &globexJob} {
		body := validBody("console-" + tenant)
		body["tenant_id"] = tenant
		code, resp := f.rest(t, "POST", "/v1/commands", body)
		if code != http.StatusAccepted {
			t.Fatalf("submit: %d %v", code, resp)
		}
		*id = resp["job_id"].(string)
	}
	cookie, csrf := f.consoleSession(t, authtest.Partner("acme"), acmeJob)

	for _, tt := range []struct {
		name, method, path, body string
		csrf                     bool
		code                     int
		reason                   string
	}{
		{"its tenant's job", "GET", "/v1/jobs/" + acmeJob, "", false, http.StatusOK, ""},
		{"another tenant's job is not found", "GET", "/v1/jobs/" + globexJob, "", false, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"another tenant's steps are not found", "GET", "/v1/jobs/" + globexJob + "/steps", "", false, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"an operator's route is forbidden", "GET", "/v1/config/global", "", false, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)},
		{"a cancel without the CSRF token", "POST", "/v1/jobs/" + acmeJob + ":cancel", "{}", false, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_CSRF_TOKEN_INVALID)},
		{"another tenant's cancel is not found", "POST", "/v1/jobs/" + globexJob + ":cancel", "{}", true, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"a ticket minted by a session", "POST", "/v1/consoleTickets", "{}", true, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_SESSION_NOT_ALLOWED)},
		{"a cancel with the CSRF token", "POST", "/v1/jobs/" + acmeJob + ":cancel", `{"reason":"console"}`, true, http.StatusOK, ""},
	} {
		token := ""
		if tt.csrf {
			token = csrf
		}
		code, body := f.withCookie(t, cookie, token, tt.method, tt.path, tt.body)
		if code != tt.code || reasonOf(body) != tt.reason {
			t.Fatalf("%s: %d %v, want %d %s", tt.name, code, body, tt.code, tt.reason)
		}
	}
	// The cancel names the partner who opened the session.
	var principal string
	if err := f.pool.QueryRow(f.ctx, `SELECT data->>'principal' FROM job_events WHERE job_id = $1 AND type = 'CANCEL_REQUESTED'`,
		acmeJob).Scan(&principal); err != nil || !strings.HasSuffix(principal, "#test-partner") {
		t.Fatalf("cancel requested by %q (%v), want the partner", principal, err)
	}
	// A forged or missing cookie is no session.
	forged := &http.Cookie{Name: "lucius_session", Value: "lcs_" + strings.Repeat("A", 43)}
	if code, body := f.withCookie(t, forged, "", "GET", "/v1/jobs/"+acmeJob, ""); code != http.StatusUnauthorized {
		t.Fatalf("forged session: %d %v", code, body)
	}
}

func TestConsoleTicketsAreForPartnersAndOperatorsWithTheirOwnCredentials(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	client := luciusv1.NewConsoleServiceClient(f.bareConn(t))
	for _, tt := range []struct {
		name  string
		grant auth.Grant
		code  codes.Code
	}{
		{"an operator", authtest.Operator(), codes.OK},
		{"a partner", authtest.Partner("acme"), codes.OK},
		{"a worker", authtest.Worker("ocr"), codes.PermissionDenied},
	} {
		resp, err := client.CreateConsoleTicket(f.issuer.Context(t, f.ctx, tt.grant), &luciusv1.CreateConsoleTicketRequest{})
		if status.Code(err) != tt.code {
			t.Fatalf("%s: %v, want %s", tt.name, err, tt.code)
		}
		if err == nil && (!strings.HasPrefix(resp.GetTicket(), "lct_") || resp.GetExpireTime() == nil) {
			t.Fatalf("%s: ticket %v", tt.name, resp)
		}
	}
	if _, err := client.CreateConsoleTicket(f.issuer.Context(t, f.ctx, authtest.Operator()),
		&luciusv1.CreateConsoleTicketRequest{JobId: "not-a-job"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a malformed job id: %v", err)
	}
	if _, err := client.CreateConsoleTicket(f.ctx, &luciusv1.CreateConsoleTicketRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credentials: %v", err)
	}
}
