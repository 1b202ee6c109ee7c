// Package auth is how Lucius knows who calls it and what they may do. It
// authenticates every gRPC call (REST reaches it through grpc-gateway's
// in-process hop, with the Authorization header as metadata) from an OAuth2 /
// OIDC bearer JWT or a verified mTLS client certificate, authorizes the RPC by
// role from one table (MethodRoles), and puts the caller's Principal in the
// context for handlers to scope data to its tenants. It also signs and checks
// the per-attempt callback tokens that bind a worker's ACK, RESULT and
// Heartbeat to the directive they answer, and runs the local issuer that the
// embedded default (make up, tests, the lucius CLI) trusts instead of an
// external identity provider.
package auth

import (
	"context"
	"slices"
	"strings"
)

// Role is what a principal may do.
type Role string

// The roles. A token may carry several.
const (
	// RolePartner submits, reads, cancels and replays the jobs of the
	// tenants its token holds, and reads their dead letters.
	RolePartner Role = "partner"
	// RoleOperator may do anything, for any tenant: configuration,
	// workflows, runbooks, dead letters, replay.
	RoleOperator Role = "operator"
	// RoleWorker calls Ack, Result, Heartbeat, RecordCheckpoint and
	// GetDirective, for the directives of the services its identity names.
	RoleWorker Role = "worker"
)

// Roles lists every role, for parsing and documentation.
var Roles = []Role{RolePartner, RoleOperator, RoleWorker}

// ParseRole reads a role name (case-insensitive); ok is false for none.
func ParseRole(s string) (Role, bool) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	return r, slices.Contains(Roles, r)
}

// Principal is an authenticated caller.
type Principal struct {
	// Subject is the token's sub (or the certificate's subject) — never a secret.
	Subject string
	// Issuer is the token issuer, or "mtls".
	Issuer string
	Roles  []Role
	// Tenants the principal acts for, normalized (lower(trim())).
	Tenants []string
	// Services a worker principal answers directives of.
	Services []string
	// Session is set when the call came with a console session (a browser's
	// cookie) rather than the principal's own token or certificate.
	Session bool `json:"-"`
}

// Has reports whether the principal holds role r.
func (p *Principal) Has(r Role) bool { return p != nil && slices.Contains(p.Roles, r) }

// Operator reports whether the principal holds the operator role.
func (p *Principal) Operator() bool { return p.Has(RoleOperator) }

// CanActFor reports whether the principal may see or act on tenant's
// resources: an operator may act for every tenant, a partner for its own.
func (p *Principal) CanActFor(tenant string) bool {
	if p == nil {
		return false
	}
	return p.Operator() || (p.Has(RolePartner) && slices.Contains(p.Tenants, NormalizeTenant(tenant)))
}

// Serves reports whether a worker principal answers directives of service.
func (p *Principal) Serves(service string) bool {
	return p.Has(RoleWorker) && slices.Contains(p.Services, strings.ToLower(strings.TrimSpace(service)))
}

// String names the principal for logs and audit events (no secrets).
func (p *Principal) String() string {
	if p == nil {
		return "anonymous"
	}
	return p.Issuer + "#" + p.Subject
}

// NormalizeTenant is the stored form of a tenant id: lower(trim()).
func NormalizeTenant(t string) string { return strings.ToLower(strings.TrimSpace(t)) }

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal the guard authenticated (nil outside a
// guarded call).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
