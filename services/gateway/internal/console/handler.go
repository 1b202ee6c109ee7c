package console

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
)

//go:embed web
var webFiles embed.FS

// The cookie and header of a session.
const (
	SessionCookie = "lucius_session"
	CSRFHeader    = "X-CSRF-Token"
)

var (
	signinPage   = template.Must(template.ParseFS(webFiles, "web/signin.html"))
	signedInPage = template.Must(template.ParseFS(webFiles, "web/signedin.html"))
)

// SessionMetadata is the REST mux option (runtime.WithMetadata) that hands
// a request's session cookie to the guard as auth.SessionMetadata.
func SessionMetadata(_ context.Context, r *http.Request) metadata.MD {
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		return metadata.Pairs(auth.SessionMetadata, c.Value)
	}
	return nil
}

// Front serves /ui/ and puts the CSRF check in front of rest (see
// server.Endpoint.Front).
func (c *Console) Front(rest http.Handler) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFiles, "web/static")
	mux.Handle("GET /ui/static/{file}", secured(http.StripPrefix("/ui/static/", http.FileServerFS(static))))
	mux.Handle("GET /ui/login", secured(http.HandlerFunc(c.login)))
	if c.cfg.OIDC != nil {
		mux.Handle("GET "+flowPath, secured(http.HandlerFunc(c.oidcStart)))
		mux.Handle("GET "+flowPath+"/callback", secured(http.HandlerFunc(c.oidcCallback)))
	}
	mux.Handle("POST /ui/logout", secured(c.requireCSRF(http.HandlerFunc(c.logout))))
	mux.Handle("GET /ui/session", secured(http.HandlerFunc(c.session)))
	mux.Handle("GET /ui/", secured(http.HandlerFunc(c.page)))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/", c.requireCSRF(rest))
	return mux
}

// secured sets the browser headers on every console response; its pages
// show tenants' data, so nothing is stored.
func secured(next http.Handler) http.Handler { return server.BrowserHeaders(next, "no-store") }

// cookieAuthenticated reports whether a request authenticates with the
// session cookie: it has one and no Authorization header (a bearer token
// takes precedence, and a browser cannot send one to another site).
func cookieAuthenticated(r *http.Request) bool {
	c, err := r.Cookie(SessionCookie)
	return err == nil && c.Value != "" && r.Header.Get("Authorization") == ""
}

// safeMethod: requests that change nothing need no CSRF token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// requireCSRF refuses (403 CSRF_TOKEN_INVALID) a change authenticated by the
// session cookie without the session's token in X-CSRF-Token. It also drops
// a session smuggled in as a Grpc-Metadata header, so the cookie is the only
// way a browser session reaches the guard.
func (c *Console) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Grpc-Metadata-" + auth.SessionMetadata)
		if !safeMethod(r.Method) && cookieAuthenticated(r) {
			cookie, _ := r.Cookie(SessionCookie)
			if !validCSRF(cookie.Value, r.Header.Get(CSRFHeader)) {
				c.log.WarnContext(r.Context(), "console: change refused without a valid CSRF token", "path", r.URL.Path)
				writeStatus(w, http.StatusForbidden, server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_CSRF_TOKEN_INVALID,
					"a change made with the console's session cookie needs the session's "+CSRFHeader+" header"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// login trades a ticket for a session and goes to the ticket's page.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	if ticket == "" {
		c.signin(w, r, http.StatusOK, "")
		return
	}
	session, landing, expires, err := c.store.Redeem(r.Context(), ticket, c.cfg.SessionTTL)
	if errors.Is(err, ErrTicketInvalid) {
		c.signin(w, r, http.StatusUnauthorized, "This login link was used already or has expired. Run lucius ui again for a new one.")
		return
	}
	if err != nil {
		c.log.ErrorContext(r.Context(), "console: redeem ticket", telemetry.Err(err))
		c.signin(w, r, http.StatusServiceUnavailable, "The console could not open a session; try again.")
		return
	}
	c.setSession(w, r, session, expires)
	http.Redirect(w, r, landing, http.StatusSeeOther)
}

// setSession sets the session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's request carries it), Path=/ (the REST API
// is under /v1/).
func (c *Console) setSession(w http.ResponseWriter, r *http.Request, session string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite always; Secure whenever served over TLS or from an https console URL (secure), which a plain-http loopback console cannot have
		Name: SessionCookie, Value: session, Path: "/", Expires: expires,
		MaxAge: int(time.Until(expires).Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
}

// secure: cookies are Secure whenever the browser reaches the console over TLS.
func (c *Console) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(c.cfg.URL, "https://")
}

// logout ends the session and clears its cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if cookie, err := r.Cookie(SessionCookie); err == nil {
		if err := c.store.EndSession(r.Context(), cookie.Value); err != nil {
			c.log.ErrorContext(r.Context(), "console: end session", telemetry.Err(err))
			writeStatus(w, http.StatusServiceUnavailable, server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "try again"))
			return
		}
	}
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite always; Secure whenever served over TLS or from an https console URL (secure), which a plain-http loopback console cannot have
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
	w.WriteHeader(http.StatusNoContent)
}

// sessionInfo is what the pages learn of their session: who, what they may
// do, and the CSRF token their changes must carry.
type sessionInfo struct {
	Principal  string    `json:"principal"`
	Roles      []string  `json:"roles"`
	Tenants    []string  `json:"tenants"`
	Operator   bool      `json:"operator"`
	ExpireTime time.Time `json:"expire_time"`
	CSRFToken  string    `json:"csrf_token"`
}

// session answers the session's principal (401 without a live session).
func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	id, p, expires, ok := c.live(w, r)
	if !ok {
		writeStatus(w, http.StatusUnauthorized, server.Error(codes.Unauthenticated, luciusv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
			"no console session: open the URL lucius ui prints"))
		return
	}
	info := sessionInfo{Principal: p.String(), Tenants: p.Tenants, Operator: p.Operator(), ExpireTime: expires, CSRFToken: csrfToken(id)}
	for _, role := range p.Roles {
		info.Roles = append(info.Roles, string(role))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(info)
}

// page serves the console's one HTML page for every page path, to a live
// session; anyone else goes to sign in.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	if _, _, _, ok := c.live(w, r); !ok {
		http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(safeLanding(r.URL.Path)), http.StatusSeeOther)
		return
	}
	body, _ := webFiles.ReadFile("web/index.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(body)
}

// live returns the request's session, if it has a live one.
func (c *Console) live(w http.ResponseWriter, r *http.Request) (string, *auth.Principal, time.Time, bool) {
	cookie, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", nil, time.Time{}, false
	}
	p, expires, err := c.store.lookup(r.Context(), cookie.Value)
	if err != nil {
		if !errors.Is(err, ErrSessionInvalid) {
			c.log.ErrorContext(r.Context(), "console: read session", telemetry.Err(err))
		}
		return "", nil, time.Time{}, false
	}
	return cookie.Value, p, expires, true
}

// signin answers the sign-in page: lucius ui's instructions, the
// provider's sign-in when OIDC is set, and what went wrong, if anything.
func (c *Console) signin(w http.ResponseWriter, r *http.Request, code int, problem string) {
	data := struct{ Problem, OIDC string }{Problem: problem}
	if c.cfg.OIDC != nil {
		data.OIDC = flowPath + "?next=" + url.QueryEscape(safeLanding(r.URL.Query().Get("next")))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := signinPage.Execute(w, data); err != nil {
		c.log.ErrorContext(r.Context(), "console: sign-in page", telemetry.Err(err))
	}
}

// writeStatus answers a refusal as the REST API does: the status as JSON.
func writeStatus(w http.ResponseWriter, code int, st *status.Status) {
	body, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(st.Proto())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
