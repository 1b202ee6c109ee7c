package console

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
)

// fakeIDP is an OIDC provider that approves every sign-in at once: its
// token endpoint checks the code and the PKCE verifier, then issues an
// access token minted by a local issuer the authenticator trusts.
type fakeIDP struct {
	srv    *httptest.Server
	issuer *auth.LocalIssuer
	grant  auth.Grant

	mu         sync.Mutex
	challenges map[string]string // code → PKCE challenge
	redirects  []string
}

func newFakeIDP(t *testing.T, grant auth.Grant) *fakeIDP {
	t.Helper()
	li, err := auth.OpenLocalIssuer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	idp := &fakeIDP{issuer: li, grant: grant, challenges: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": idp.srv.URL, "authorization_endpoint": idp.srv.URL + "/authorize",
			"token_endpoint": idp.srv.URL + "/token", "jwks_uri": idp.srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != "console" || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" ||
			q.Get("scope") != "openid api://lucius/.default" {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		code := newSecret("code_")
		idp.mu.Lock()
		idp.challenges[code] = q.Get("code_challenge")
		idp.redirects = append(idp.redirects, q.Get("redirect_uri"))
		idp.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, secret, _ := r.BasicAuth()
		idp.mu.Lock()
		challenge, ok := idp.challenges[r.Form.Get("code")]
		delete(idp.challenges, r.Form.Get("code"))
		idp.mu.Unlock()
		sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
		if !ok || id != "console" || secret != "s3cret" || base64.RawURLEncoding.EncodeToString(sum[:]) != challenge {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant"})
			return
		}
		tok, err := li.Mint(idp.grant, time.Hour)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	idp.srv = httptest.NewServer(mux)
	t.Cleanup(idp.srv.Close)
	return idp
}

// oidcFront is a console signing in at idp.
func oidcFront(t *testing.T, idp *fakeIDP) http.Handler {
	t.Helper()
	s, _ := newStore(t)
	authn, err := auth.NewAuthenticator(auth.Config{JWKSFile: idp.issuer.JWKSPath()})
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(Config{URL: "https://console.example", OIDC: &OIDC{Issuer: idp.srv.URL, ClientID: "console", ClientSecret: "s3cret",
		Scopes: []string{"openid", "api://lucius/.default"}}}, s, authn, "127.0.0.1:8080", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return con.Front(http.NotFoundHandler())
}

// start begins a sign-in and follows the provider to the callback URL;
// it returns the flow cookie and the callback's path and query.
func startSignIn(t *testing.T, h http.Handler, next string) (*http.Cookie, string) {
	t.Helper()
	rec := serve(h, "GET", "/ui/login/oidc?next="+url.QueryEscape(next), nil, nil)
	var flow *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == flowCookie {
			flow = c
		}
	}
	if rec.Code != http.StatusSeeOther || flow == nil || !flow.HttpOnly || flow.SameSite != http.SameSiteLaxMode || !flow.Secure {
		t.Fatalf("start: %d, flow cookie %+v\n%s", rec.Code, flow, rec.Body)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(rec.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cb, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || cb.Host != "console.example" || cb.Path != "/ui/login/oidc/callback" {
		t.Fatalf("the provider answered %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return flow, cb.RequestURI()
}

func TestOIDCSignInOpensASessionOfTheProvidersToken(t *testing.T) {
	t.Parallel()
	idp := newFakeIDP(t, auth.Grant{Subject: "carol", Roles: []auth.Role{auth.RolePartner}, Tenants: []string{"acme"}})
	h := oidcFront(t, idp)

	// Pages send the browser to sign in, keeping where it was going.
	rec := serve(h, "GET", "/ui/deadletters/7", nil, nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login?next=%2Fui%2Fdeadletters%2F7" {
		t.Fatalf("a page without a session: %d to %q", rec.Code, rec.Header().Get("Location"))
	}
	rec = serve(h, "GET", "/ui/login?next=%2Fui%2Fdeadletters%2F7", nil, nil)
	if !strings.Contains(rec.Body.String(), `href="/ui/login/oidc?next=%2Fui%2Fdeadletters%2F7"`) {
		t.Fatalf("the sign-in page offers no provider sign-in:\n%s", rec.Body)
	}

	flow, callback := startSignIn(t, h, "/ui/deadletters/7")
	if idp.redirects[0] != "https://console.example/ui/login/oidc/callback" {
		t.Fatalf("redirect URI %q", idp.redirects[0])
	}
	rec = serve(h, "GET", callback, flow, nil)
	var session *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			session = c
		}
	}
	if rec.Code != http.StatusOK || session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode ||
		!strings.Contains(rec.Body.String(), `content="0;url=/ui/deadletters/7"`) {
		t.Fatalf("callback: %d, session %+v\n%s", rec.Code, session, rec.Body)
	}
	rec = serve(h, "GET", "/ui/session", session, nil)
	var info sessionInfo
	if err := json.NewDecoder(rec.Body).Decode(&info); err != nil || info.Principal != "lucius-local#carol" || info.Operator ||
		len(info.Tenants) != 1 || info.Tenants[0] != "acme" {
		t.Fatalf("session: %+v %v", info, err)
	}
	// The code was used up: the same callback again opens nothing.
	if rec := serve(h, "GET", callback, flow, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a replayed callback answered %d", rec.Code)
	}
}

func TestOIDCCallbackRefusesWhatItDidNotStart(t *testing.T) {
	t.Parallel()
	idp := newFakeIDP(t, auth.Grant{Subject: "carol", Roles: []auth.Role{auth.RolePartner}, Tenants: []string{"acme"}})
	h := oidcFront(t, idp)
	for _, tt := range []struct {
		name     string
		tamper   func(flow *http.Cookie, callback string) (*http.Cookie, string)
		code     int
		contains string
	}{
		{"no flow cookie", func(_ *http.Cookie, cb string) (*http.Cookie, string) { return nil, cb }, http.StatusUnauthorized, "not started here"},
		{"another sign-in's state", func(f *http.Cookie, cb string) (*http.Cookie, string) {
			g := *f
			g.Value = newSecret("") + g.Value[strings.Index(g.Value, "~"):]
			return &g, cb
		}, http.StatusUnauthorized, "not started here"},
		{"another PKCE verifier", func(f *http.Cookie, cb string) (*http.Cookie, string) {
			parts := strings.Split(f.Value, "~")
			g := *f
			g.Value = parts[0] + "~" + strings.Repeat("x", 43) + "~" + parts[2]
			return &g, cb
		}, http.StatusUnauthorized, "did not confirm"},
		{"the provider's refusal", func(f *http.Cookie, _ string) (*http.Cookie, string) {
			return f, "/ui/login/oidc/callback?error=access_denied&error_description=%3Cb%3Eno%3C%2Fb%3E"
		}, http.StatusUnauthorized, "access_denied &lt;b&gt;no&lt;/b&gt;"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			flow, callback := startSignIn(t, h, "/ui/jobs")
			cookie, cb := tt.tamper(flow, callback)
			rec := serve(h, "GET", cb, cookie, nil)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.contains) || strings.Contains(rec.Header().Get("Set-Cookie"), SessionCookie+"=lcs_") {
				t.Fatalf("%d %v\n%s", rec.Code, rec.Header(), rec.Body)
			}
		})
	}
	// A token that grants no Lucius role opens no session.
	noRole := newFakeIDP(t, auth.Grant{Subject: "mallory", Roles: []auth.Role{"guest"}})
	h = oidcFront(t, noRole)
	flow, callback := startSignIn(t, h, "/ui/jobs")
	if rec := serve(h, "GET", callback, flow, nil); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "grants no Lucius access") {
		t.Fatalf("a token without a role: %d\n%s", rec.Code, rec.Body)
	}
}

func TestSafeLandingKeepsBrowsersOnTheConsole(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/ui/jobs/" + strings.Repeat("a", 64): "/ui/jobs/" + strings.Repeat("a", 64),
		"/ui/deadletters/7":                   "/ui/deadletters/7",
		"/ui/tenants/acme.eu":                 "/ui/tenants/acme.eu",
		"":                                    "/ui/jobs",
		"/ui/":                                "/ui/jobs",
		"https://evil.example/ui/jobs":        "/ui/jobs",
		"//evil.example/ui/jobs":              "/ui/jobs",
		"/ui//evil.example":                   "/ui/jobs",
		"/ui/../v1/jobs":                      "/ui/jobs",
		"/ui/./x":                             "/ui/jobs",
		"/ui/jobs?x=1":                        "/ui/jobs",
		"/ui/login":                           "/ui/jobs",
		"/ui/jobs\\evil":                      "/ui/jobs",
		"/ui/jobs\n":                          "/ui/jobs",
		"/v1/jobs":                            "/ui/jobs",
	} {
		if got := safeLanding(next); got != want {
			t.Errorf("safeLanding(%q) = %q, want %q", next, got, want)
		}
	}
}

// FuzzSafeLanding: whatever a link carries, the landing is a plain path of
// the console.
func FuzzSafeLanding(f *testing.F) {
	for _, s := range []string{"/ui/jobs", "//x", "/ui/../x", "/ui/jobs/a.b", "/ui/\\x", "/ui/%2e%2e/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeLanding(next)
		if !strings.HasPrefix(got, "/ui/") || strings.Contains(got, "//") || strings.Contains(got, "/.") ||
			strings.ContainsAny(got, "\\?#%:@\r\n\t ") || (got != next && got != "/ui/jobs") {
			t.Fatalf("safeLanding(%q) = %q", next, got)
		}
	})
}
