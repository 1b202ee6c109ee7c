package auth

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/server"
)

// Guard authenticates and authorizes every call a service serves: gRPC
// (and so REST, which reaches gRPC through grpc-gateway's in-process hop)
// through its interceptors, and the operations endpoints through HTTP.
// With a nil Authenticator every call but the health checks is refused.
type Guard struct {
	authn    *Authenticator
	sessions SessionStore
	roles    map[string][]Role
	log      *slog.Logger
}

// SessionStore resolves a console session id (the value of the gateway's
// session cookie) to the principal that opened it; any error refuses the
// call. The gateway's console implements it.
type SessionStore interface {
	Session(ctx context.Context, id string) (*Principal, error)
}

// SessionMetadata is the gRPC metadata key that carries a console session
// id: the gateway's REST hop copies the session cookie there.
const SessionMetadata = "lucius-session"

// WithSessions makes the guard accept console sessions (after bearer tokens
// and client certificates) and returns it.
func (g *Guard) WithSessions(s SessionStore) *Guard {
	g.sessions = s
	return g
}

var _ server.Guard = (*Guard)(nil)

// NewGuard returns a guard over authn (nil: refuse everything guarded)
// with the roles of MethodRoles.
func NewGuard(authn *Authenticator, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{authn: authn, roles: MethodRoles, log: log}
}

// UnaryServerInterceptor guards unary calls.
func (g *Guard) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := g.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor guards streaming calls.
func (g *Guard) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := g.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
	}
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

// admit authenticates the caller of method and checks its role.
func (g *Guard) admit(ctx context.Context, method string) (context.Context, error) {
	if OpenMethods[method] {
		return ctx, nil
	}
	p, err := g.authenticate(ctx)
	if err != nil {
		g.deny(ctx, nil, method, err.Error())
		return ctx, Unauthenticated(err)
	}
	allowed, known := g.roles[method]
	if !known || !slices.ContainsFunc(allowed, p.Has) {
		reason := "role not allowed"
		if !known {
			reason = "method not in the role table"
		}
		g.deny(ctx, p, method, reason)
		return ctx, PermissionDenied(method + " is not allowed for " + rolesText(p.Roles))
	}
	return NewContext(ctx, p), nil
}

func (g *Guard) authenticate(ctx context.Context) (*Principal, error) {
	if g.authn == nil {
		return nil, errors.New("this service trusts no issuer")
	}
	if raw, ok := bearer(metadata.ValueFromIncomingContext(ctx, "authorization")); ok {
		return g.authn.Authenticate(ctx, raw)
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			return g.authn.AuthenticateCert(ti.State.VerifiedChains)
		}
	}
	if ids := metadata.ValueFromIncomingContext(ctx, SessionMetadata); g.sessions != nil && len(ids) == 1 {
		p, err := g.sessions.Session(ctx, ids[0])
		if err != nil {
			return nil, err
		}
		s := *p
		s.Session = true
		return &s, nil
	}
	return nil, ErrNoCredentials
}

// deny logs a refused call: principal, method and reason, never the token.
func (g *Guard) deny(ctx context.Context, p *Principal, method, reason string) {
	g.log.WarnContext(ctx, "call denied", "principal", p.String(), "method", method, "reason", reason)
}

// HTTP guards an operations handler (/metrics, /debug/pprof/): an operator
// bearer token is required.
func (g *Guard) HTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := bearer([]string{r.Header.Get("Authorization")})
		if !ok || g.authn == nil {
			g.deny(r.Context(), nil, r.URL.Path, "no bearer token")
			w.Header().Set("WWW-Authenticate", `Bearer realm="lucius"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		p, err := g.authn.Authenticate(r.Context(), raw)
		if err != nil {
			g.deny(r.Context(), nil, r.URL.Path, err.Error())
			w.Header().Set("WWW-Authenticate", `Bearer realm="lucius", error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		if !p.Operator() {
			g.deny(r.Context(), p, r.URL.Path, "operator role required")
			http.Error(w, "the operator role is required", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func bearer(values []string) (string, bool) {
	for _, v := range values {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "bearer") && strings.TrimSpace(tok) != "" {
			return strings.TrimSpace(tok), true
		}
	}
	return "", false
}

func rolesText(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return "role(s) " + strings.Join(s, ", ")
}

// Unauthenticated is the status of a call without valid credentials
// (HTTP 401 with WWW-Authenticate on REST).
func Unauthenticated(err error) error {
	return server.Error(codes.Unauthenticated, luciusv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "authentication required: "+err.Error()).Err()
}

// PermissionDenied is the status of an authenticated call its roles do not allow (HTTP 403).
func PermissionDenied(msg string) error {
	return server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED, msg).Err()
}

// RequireTenant refuses (PERMISSION_DENIED, reason TENANT_NOT_HELD) a
// principal acting for a tenant it does not hold, such as a partner
// submitting for another tenant.
func RequireTenant(ctx context.Context, tenant string) error {
	p := FromContext(ctx)
	if p.CanActFor(tenant) {
		return nil
	}
	return server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_TENANT_NOT_HELD,
		"the caller may not act for tenant "+NormalizeTenant(tenant), "tenant_id", NormalizeTenant(tenant)).Err()
}

// IsDenied reports whether err is an authentication or authorization refusal.
func IsDenied(err error) bool {
	c := status.Code(err)
	return c == codes.Unauthenticated || c == codes.PermissionDenied
}
