package console

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/lucius-platform/lucius/base/telemetry"
)

// OIDC signs browsers in at the identity provider the gateway trusts
// (authorization code with PKCE), beside lucius ui's tickets: the access
// token the provider issues for the console's client is checked by the
// same authenticator as any bearer token, so the session is that token's
// principal. The client's redirect URI is <Config.URL>/ui/login/oidc/callback.
type OIDC struct {
	// Issuer is the provider's issuer URL (its discovery document is read
	// on the first sign-in), e.g. https://login.microsoftonline.com/<tenant>/v2.0.
	Issuer string
	// ClientID and ClientSecret identify the console's client; without a
	// secret it is a public client (PKCE only).
	ClientID     string
	ClientSecret string
	// Scopes must yield an access token for Lucius's audience with the
	// role and tenant claims, e.g. openid api://lucius/.default (default: openid).
	Scopes []string
}

func (o *OIDC) validate(consoleURL string) error {
	u, err := url.Parse(o.Issuer)
	var errs []error
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("console OIDC issuer %q must be an http(s) URL", o.Issuer))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("console OIDC needs a client id"))
	}
	if consoleURL == "" {
		errs = append(errs, errors.New("console OIDC needs the console URL (its redirect URI is <URL>/ui/login/oidc/callback)"))
	}
	return errors.Join(errs...)
}

// The flow cookie carries state, PKCE verifier and landing from the start
// of a sign-in to its callback. SameSite=Lax: the provider's redirect back
// is a cross-site navigation, which a Strict cookie would miss.
const (
	flowCookie = "lucius_oidc"
	flowPath   = "/ui/login/oidc"
	flowTTL    = 10 * time.Minute
)

// provider discovers the issuer once (again after a failure).
type provider struct {
	mu       sync.Mutex
	endpoint *oauth2.Endpoint
}

func (c *Console) oauth(ctx context.Context) (*oauth2.Config, error) {
	o := c.cfg.OIDC
	c.idp.mu.Lock()
	defer c.idp.mu.Unlock()
	if c.idp.endpoint == nil {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p, err := oidc.NewProvider(dctx, strings.TrimSuffix(o.Issuer, "/"))
		if err != nil {
			return nil, fmt.Errorf("discover %s: %w", o.Issuer, err)
		}
		ep := p.Endpoint()
		c.idp.endpoint = &ep
	}
	scopes := o.Scopes
	if len(scopes) == 0 {
		scopes = []string{oidc.ScopeOpenID}
	}
	return &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, Endpoint: *c.idp.endpoint,
		RedirectURL: strings.TrimSuffix(c.cfg.URL, "/") + flowPath + "/callback", Scopes: scopes}, nil
}

// landingPath is the console page to open after a sign-in: next when it is
// a plain path under /ui/, else the jobs page. Nothing else may come
// through, so a crafted link cannot send the browser off the console.
var landingPath = regexp.MustCompile(`^/ui/[A-Za-z0-9_-][A-Za-z0-9_./-]*$`)

func safeLanding(next string) string {
	if !landingPath.MatchString(next) || strings.Contains(next, "//") || strings.Contains(next, "/.") ||
		strings.HasPrefix(next, "/ui/login") {
		return "/ui/jobs"
	}
	return next
}

// oidcStart sends the browser to the provider.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	oc, err := c.oauth(r.Context())
	if err != nil {
		c.log.ErrorContext(r.Context(), "console: OIDC discovery", telemetry.Err(err))
		c.signin(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached; try again, or use lucius ui.")
		return
	}
	state, verifier := newSecret(""), oauth2.GenerateVerifier()
	landing := base64.RawURLEncoding.EncodeToString([]byte(safeLanding(r.URL.Query().Get("next"))))
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite always; Secure whenever served over TLS or from an https console URL (secure), which a plain-http loopback console cannot have
		Name: flowCookie, Value: state + "~" + verifier + "~" + landing, Path: flowPath,
		MaxAge: int(flowTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: c.secure(r)})
	http.Redirect(w, r, oc.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), http.StatusSeeOther)
}

// oidcCallback trades the provider's code for its access token, and the
// token's principal for a session.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite always; Secure whenever served over TLS or from an https console URL (secure), which a plain-http loopback console cannot have
		Name: flowCookie, Value: "", Path: flowPath, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: c.secure(r)})
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		c.signin(w, r, http.StatusUnauthorized, "The identity provider refused the sign-in: "+e+" "+q.Get("error_description"))
		return
	}
	cookie, err := r.Cookie(flowCookie)
	parts := []string{}
	if err == nil {
		parts = strings.Split(cookie.Value, "~")
	}
	if len(parts) != 3 || q.Get("state") == "" || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		c.signin(w, r, http.StatusUnauthorized, "This sign-in was not started here, or took too long. Sign in again.")
		return
	}
	landing, _ := base64.RawURLEncoding.DecodeString(parts[2])
	oc, err := c.oauth(r.Context())
	if err != nil {
		c.log.ErrorContext(r.Context(), "console: OIDC discovery", telemetry.Err(err))
		c.signin(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached; try again.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	tok, err := oc.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(parts[1]))
	if err != nil {
		c.log.WarnContext(r.Context(), "console: OIDC code exchange", telemetry.Err(err))
		c.signin(w, r, http.StatusUnauthorized, "The identity provider did not confirm the sign-in. Sign in again.")
		return
	}
	p, err := c.authn.Authenticate(ctx, tok.AccessToken)
	if err != nil {
		c.log.WarnContext(r.Context(), "console: OIDC token refused", telemetry.Err(err))
		c.signin(w, r, http.StatusForbidden, "Your identity grants no Lucius access ("+err.Error()+").")
		return
	}
	session, expires, err := c.store.OpenSession(ctx, p, c.cfg.SessionTTL)
	if err != nil {
		c.log.ErrorContext(r.Context(), "console: open session", telemetry.Err(err))
		c.signin(w, r, http.StatusServiceUnavailable, "The console could not open a session; try again.")
		return
	}
	c.setSession(w, r, session, expires)
	// A page, not a redirect: the provider's cross-site redirect chain would
	// keep the Strict cookie off the next request; the page's own
	// navigation is same-site and carries it.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := signedInPage.Execute(w, struct{ Landing string }{safeLanding(string(landing))}); err != nil {
		c.log.ErrorContext(r.Context(), "console: signed-in page", telemetry.Err(err))
	}
}
