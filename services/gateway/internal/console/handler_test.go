package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
)

// front is a console in front of a fake REST API that answers 200 "rest".
func front(t *testing.T) (http.Handler, *Store, *clock) {
	t.Helper()
	s, c := newStore(t)
	con, err := New(Config{}, s, nil, "127.0.0.1:8080", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rest := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "rest") })
	return con.Front(rest), s, c
}

// login opens a session of p through /ui/login and returns its cookie.
func login(t *testing.T, h http.Handler, s *Store, p *auth.Principal) *http.Cookie {
	t.Helper()
	ticket, _, err := s.CreateTicket(context.Background(), p, "/ui/jobs/abc", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(h, "GET", "/ui/login?ticket="+url.QueryEscape(ticket), nil, nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/jobs/abc" {
		t.Fatalf("login: %d to %q", rec.Code, rec.Header().Get("Location"))
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	t.Fatal("login set no session cookie")
	return nil
}

func serve(h http.Handler, method, path string, cookie *http.Cookie, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader("{}"))
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestChangesMadeWithTheSessionCookieNeedItsCSRFToken(t *testing.T) {
	t.Parallel()
	h, s, _ := front(t)
	cookie := login(t, h, s, partner)
	other := login(t, h, s, partner)
	token := csrfToken(cookie.Value)
	for _, tt := range []struct {
		name    string
		method  string
		cookie  *http.Cookie
		header  map[string]string
		allowed bool
	}{
		{"a read with the cookie", "GET", cookie, nil, true},
		{"HEAD with the cookie", "HEAD", cookie, nil, true},
		{"a change with the cookie and its token", "POST", cookie, map[string]string{CSRFHeader: token}, true},
		{"a change with the cookie and no token", "POST", cookie, nil, false},
		{"PUT with the cookie and no token", "PUT", cookie, nil, false},
		{"DELETE with the cookie and no token", "DELETE", cookie, nil, false},
		{"PATCH with the cookie and another session's token", "PATCH", cookie, map[string]string{CSRFHeader: csrfToken(other.Value)}, false},
		{"a change with the cookie and the session id as token", "POST", cookie, map[string]string{CSRFHeader: cookie.Value}, false},
		{"a change with a bearer token and the cookie", "POST", cookie, map[string]string{"Authorization": "Bearer x"}, true},
		{"a change with a bearer token alone", "POST", nil, map[string]string{"Authorization": "Bearer x"}, true},
		{"a change with no credentials (the guard refuses it)", "POST", nil, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := serve(h, tt.method, "/v1/jobs/x:cancel", tt.cookie, tt.header)
			if allowed := rec.Code == http.StatusOK; allowed != tt.allowed {
				t.Fatalf("%s answered %d %s, want allowed=%t", tt.method, rec.Code, rec.Body, tt.allowed)
			}
			if !tt.allowed && !strings.Contains(rec.Body.String(), "CSRF_TOKEN_INVALID") {
				t.Fatalf("refusal lacks its reason: %s", rec.Body)
			}
		})
	}
}

func TestConsoleRoutesNeedASessionButLoginAndAssets(t *testing.T) {
	t.Parallel()
	h, s, c := front(t)
	cookie := login(t, h, s, partner)
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.MaxAge <= 0 {
		t.Fatalf("session cookie %+v", cookie)
	}
	for _, tt := range []struct {
		name     string
		method   string
		path     string
		cookie   *http.Cookie
		header   map[string]string
		code     int
		location string
		contains string
	}{
		{"the jobs page without a session", "GET", "/ui/jobs", nil, nil, http.StatusSeeOther, "/ui/login?next=%2Fui%2Fjobs", ""},
		{"a job page without a session", "GET", "/ui/jobs/" + strings.Repeat("a", 64), nil, nil, http.StatusSeeOther,
			"/ui/login?next=%2Fui%2Fjobs%2F" + strings.Repeat("a", 64), ""},
		{"the root without a session", "GET", "/ui/", nil, nil, http.StatusSeeOther, "/ui/login?next=%2Fui%2Fjobs", ""},
		{"a page with a forged cookie", "GET", "/ui/jobs", &http.Cookie{Name: SessionCookie, Value: newSecret(sessionPrefix)}, nil,
			http.StatusSeeOther, "/ui/login?next=%2Fui%2Fjobs", ""},
		{"no provider sign-in without OIDC", "GET", "/ui/login/oidc", nil, nil, http.StatusSeeOther, "/ui/login?next=%2Fui%2Fjobs", ""},
		{"the session without a session", "GET", "/ui/session", nil, nil, http.StatusUnauthorized, "", "UNAUTHENTICATED"},
		{"the jobs page", "GET", "/ui/jobs", cookie, nil, http.StatusOK, "", `src="/ui/static/console.js"`},
		{"a job page", "GET", "/ui/jobs/" + strings.Repeat("a", 64), cookie, nil, http.StatusOK, "", "<main"},
		{"the sign-in page", "GET", "/ui/login", nil, nil, http.StatusOK, "", "lucius ui"},
		{"an unknown ticket", "GET", "/ui/login?ticket=" + newSecret(ticketPrefix), nil, nil, http.StatusUnauthorized, "", "used already or has expired"},
		{"a malformed ticket", "GET", "/ui/login?ticket=%3Cscript%3E", nil, nil, http.StatusUnauthorized, "", "used already or has expired"},
		{"a script", "GET", "/ui/static/console.js", nil, nil, http.StatusOK, "", "loadSession"},
		{"the stylesheet", "GET", "/ui/static/console.css", nil, nil, http.StatusOK, "", "st-SUCCEEDED"},
		{"a missing asset", "GET", "/ui/static/nope.js", nil, nil, http.StatusNotFound, "", ""},
		{"no listing of the assets", "GET", "/ui/static/", nil, nil, http.StatusSeeOther, "/ui/login?next=%2Fui%2Fstatic%2F", ""},
		{"logout without the token", "POST", "/ui/logout", cookie, nil, http.StatusForbidden, "", "CSRF_TOKEN_INVALID"},
	} {
		t.Run(tt.name, func(t *testing.T) { // not parallel: the cookie is logged out below
			rec := serve(h, tt.method, tt.path, tt.cookie, tt.header)
			if rec.Code != tt.code || rec.Header().Get("Location") != tt.location || !strings.Contains(rec.Body.String(), tt.contains) {
				t.Fatalf("%s %s: %d to %q\n%s", tt.method, tt.path, rec.Code, rec.Header().Get("Location"), rec.Body)
			}
			csp := rec.Header().Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
				t.Fatalf("Content-Security-Policy %q", csp)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Referrer-Policy") != "no-referrer" {
				t.Fatalf("headers %v", rec.Header())
			}
		})
	}

	// The session tells the page who it is and the token its changes need.
	rec := serve(h, "GET", "/ui/session", cookie, nil)
	var info sessionInfo
	if err := json.NewDecoder(rec.Body).Decode(&info); err != nil || info.Principal != "lucius-local#alice" ||
		info.Operator || len(info.Tenants) != 1 || info.Tenants[0] != "acme" || info.CSRFToken != csrfToken(cookie.Value) {
		t.Fatalf("session: %d %+v %v", rec.Code, info, err)
	}
	// Logout ends the session and clears the cookie.
	rec = serve(h, "POST", "/ui/logout", cookie, map[string]string{CSRFHeader: info.CSRFToken})
	if rec.Code != http.StatusNoContent || !strings.Contains(rec.Header().Get("Set-Cookie"), SessionCookie+"=;") {
		t.Fatalf("logout: %d %v", rec.Code, rec.Header())
	}
	if rec := serve(h, "GET", "/ui/jobs", cookie, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("a page after logout answered %d", rec.Code)
	}
	// A session expires.
	cookie = login(t, h, s, partner)
	c.advance(9 * time.Hour)
	if rec := serve(h, "GET", "/ui/session", cookie, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("an expired session answered %d", rec.Code)
	}
}

func TestSessionCookieReachesTheGuardAsMetadata(t *testing.T) {
	t.Parallel()
	req := httptest.NewRequest("GET", "/v1/jobs", nil)
	if md := SessionMetadata(context.Background(), req); md != nil {
		t.Fatalf("metadata without a cookie: %v", md)
	}
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "lcs_x"})
	if got := SessionMetadata(context.Background(), req).Get(auth.SessionMetadata); len(got) != 1 || got[0] != "lcs_x" {
		t.Fatalf("metadata %v", got)
	}
}

func TestConfigRefusesBadConsoleURLsAndTTLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{URL: "https://lucius.example.com"}, true},
		{Config{URL: "http://127.0.0.1:8080/"}, true},
		{Config{URL: "lucius.example.com"}, false},
		{Config{URL: "ftp://lucius.example.com"}, false},
		{Config{URL: "https://lucius.example.com/console"}, false},
		{Config{TicketTTL: time.Hour}, false},
		{Config{SessionTTL: -time.Second}, false},
		{Config{URL: "https://lucius.example.com", OIDC: &OIDC{Issuer: "https://idp.example/v2.0", ClientID: "console"}}, true},
		{Config{OIDC: &OIDC{Issuer: "https://idp.example/v2.0", ClientID: "console"}}, false},
		{Config{URL: "https://lucius.example.com", OIDC: &OIDC{Issuer: "https://idp.example/v2.0"}}, false},
		{Config{URL: "https://lucius.example.com", OIDC: &OIDC{Issuer: "idp.example", ClientID: "console"}}, false},
	} {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: %v, want ok=%t", tt.cfg, err, tt.ok)
		}
	}
}
