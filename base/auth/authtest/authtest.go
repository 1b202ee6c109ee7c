// Package authtest gives tests a real local issuer, the guard that trusts it
// and tokens to call with, so every test authenticates the way production
// callers do.
package authtest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/lucius-platform/lucius/base/auth"
)

// Issuer is a local issuer in a test's temporary directory.
type Issuer struct {
	*auth.LocalIssuer
	Dir string
	// Config trusts the issuer (for a service's process.Service.Auth).
	Config auth.Config
	Authn  *auth.Authenticator
}

// New creates an issuer for t.
func New(t testing.TB) *Issuer {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "issuer")
	li, err := auth.OpenLocalIssuer(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := auth.Config{JWKSFile: li.JWKSPath()}
	authn, err := auth.NewAuthenticator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{LocalIssuer: li, Dir: dir, Config: cfg, Authn: authn}
}

// Guard is a guard trusting the issuer.
func (i *Issuer) Guard() *auth.Guard { return auth.NewGuard(i.Authn, slog.New(slog.DiscardHandler)) }

// Token mints a token for g, valid one hour.
func (i *Issuer) Token(t testing.TB, g auth.Grant) string {
	t.Helper()
	tok, err := i.Mint(g, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Partner is one of the grants tests use most (with Operator and Worker).
func Partner(tenants ...string) auth.Grant {
	return auth.Grant{Subject: "test-partner", Roles: []auth.Role{auth.RolePartner}, Tenants: tenants}
}

// Operator grants the operator role.
func Operator() auth.Grant {
	return auth.Grant{Subject: "test-operator", Roles: []auth.Role{auth.RoleOperator}}
}

// Worker grants the worker role for services.
func Worker(services ...string) auth.Grant {
	return auth.Grant{Subject: "test-worker", Roles: []auth.Role{auth.RoleWorker}, Services: services}
}

// Creds is a dial option sending a token for g with every call.
func (i *Issuer) Creds(t testing.TB, g auth.Grant) grpc.DialOption {
	return grpc.WithPerRPCCredentials(auth.BearerToken(i.Token(t, g)))
}

// Context returns ctx with a token for g in its outgoing metadata.
func (i *Issuer) Context(t testing.TB, ctx context.Context, g auth.Grant) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+i.Token(t, g))
}

// TokenFile writes a token for g to a file and returns its path.
func (i *Issuer) TokenFile(t testing.TB, g auth.Grant) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token.jwt")
	if err := os.WriteFile(path, []byte(i.Token(t, g)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
