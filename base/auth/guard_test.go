package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// sessions is a SessionStore of fixed sessions.
type sessions map[string]*Principal

func (s sessions) Session(_ context.Context, id string) (*Principal, error) {
	if p, ok := s[id]; ok {
		return p, nil
	}
	return nil, errors.New("the console session is unknown or expired")
}

func TestGuardAcceptsConsoleSessionsAfterTokens(t *testing.T) {
	t.Parallel()
	li, err := OpenLocalIssuer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	authn, err := NewAuthenticator(Config{JWKSFile: li.JWKSPath()})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := li.Mint(Grant{Subject: "op", Roles: []Role{RoleOperator}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	alice := &Principal{Subject: "alice", Issuer: "idp", Roles: []Role{RolePartner}, Tenants: []string{"acme"}}
	store := sessions{"lcs_alice": alice}
	getJob := luciusv1.JobService_GetJob_FullMethodName
	for _, tt := range []struct {
		name     string
		store    SessionStore
		md       []string
		method   string
		code     codes.Code
		want     string
		session  bool
		tenantOK string
	}{
		{"a session acts as its principal", store, []string{SessionMetadata, "lcs_alice"}, getJob, codes.OK, "idp#alice", true, "acme"},
		{"a session keeps its roles", store, []string{SessionMetadata, "lcs_alice"}, luciusv1.ConfigService_GetGlobalConfig_FullMethodName,
			codes.PermissionDenied, "", false, ""},
		{"an unknown session", store, []string{SessionMetadata, "lcs_bob"}, getJob, codes.Unauthenticated, "", false, ""},
		{"two sessions at once", store, []string{SessionMetadata, "lcs_alice", SessionMetadata, "lcs_alice"}, getJob,
			codes.Unauthenticated, "", false, ""},
		{"a session where none are accepted", nil, []string{SessionMetadata, "lcs_alice"}, getJob, codes.Unauthenticated, "", false, ""},
		{"a bearer token wins over a session", store, []string{"authorization", "Bearer " + operator, SessionMetadata, "lcs_alice"},
			getJob, codes.OK, "lucius-local#op", false, "evil"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGuard(authn, nil)
			if tt.store != nil {
				g = g.WithSessions(tt.store)
			}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tt.md...))
			var got *Principal
			_, err := g.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tt.method},
				func(ctx context.Context, _ any) (any, error) { got = FromContext(ctx); return nil, nil })
			if status.Code(err) != tt.code {
				t.Fatalf("%v, want %s", err, tt.code)
			}
			if tt.code != codes.OK {
				return
			}
			if got.String() != tt.want || got.Session != tt.session || !got.CanActFor(tt.tenantOK) {
				t.Fatalf("principal %+v", got)
			}
		})
	}
	if alice.Session {
		t.Fatal("the guard marked the store's own principal")
	}
}
