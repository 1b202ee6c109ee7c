package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestAuthenticateLocalIssuerTokens(t *testing.T) {
	t.Parallel()
	li, err := OpenLocalIssuer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(Config{JWKSFile: li.JWKSPath(), ClockSkew: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := OpenLocalIssuer(t.TempDir())
	mint := func(l *LocalIssuer, g Grant, ttl time.Duration) string {
		tok, err := l.Mint(g, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	partner := Grant{Subject: "p", Roles: []Role{RolePartner}, Tenants: []string{" Acme "}}
	for _, tc := range []struct {
		name    string
		token   string
		wantErr error
		check   func(*Principal) bool
	}{
		{"partner", mint(li, partner, time.Minute), nil, func(p *Principal) bool {
			return p.Has(RolePartner) && p.CanActFor("ACME") && !p.CanActFor("evil") && !p.Operator()
		}},
		{"operator acts for any tenant", mint(li, Grant{Subject: "o", Roles: []Role{RoleOperator}}, time.Minute), nil,
			func(p *Principal) bool { return p.CanActFor("evil") }},
		{"worker", mint(li, Grant{Subject: "w", Roles: []Role{RoleWorker}, Services: []string{"OCR"}}, time.Minute), nil,
			func(p *Principal) bool { return p.Serves("ocr") && !p.Serves("sis") && !p.CanActFor("acme") }},
		{"expired beyond the skew", mint(li, partner, -time.Minute), ErrInvalidToken, nil},
		{"expired within the skew", mint(li, partner, -10*time.Second), nil, func(p *Principal) bool { return true }},
		{"another audience", mint(li, Grant{Subject: "p", Roles: []Role{RolePartner}, Audience: "other"}, time.Minute), ErrInvalidToken, nil},
		{"signed by an untrusted key", mint(stranger, partner, time.Minute), ErrInvalidToken, nil},
		{"no role", mint(li, Grant{Subject: "x", Roles: []Role{"admin"}}, time.Minute), ErrNoGrant, nil},
		{"garbage", "abc.def.ghi", ErrInvalidToken, nil},
		{"unsigned", unsignedToken(t), ErrInvalidToken, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := a.Authenticate(context.Background(), tc.token)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(p) {
				t.Fatalf("principal %+v, err %v", p, err)
			}
		})
	}
}

func unsignedToken(t *testing.T) string {
	t.Helper()
	header := `{"alg":"none","typ":"JWT"}`
	claims := `{"iss":"lucius-local","aud":"lucius","sub":"x","roles":["operator"],"exp":9999999999}`
	enc := func(s string) string { return strings.TrimRight(b64url([]byte(s)), "=") }
	return enc(header) + "." + enc(claims) + "."
}

// oidcProvider serves discovery and a JWKS whose keys the test rotates.
type oidcProvider struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []jose.JSONWebKey // private
	jwks int               // JWKS fetches
}

func newOIDCProvider(t *testing.T) *oidcProvider {
	p := &oidcProvider{}
	p.rotate(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/keys",
			"authorization_endpoint": p.srv.URL + "/auth", "token_endpoint": p.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.jwks++
		set := jose.JSONWebKeySet{}
		for _, k := range p.keys {
			set.Keys = append(set.Keys, k.Public())
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// rotate adds a new signing key in front; the old one stays published.
func (p *oidcProvider) rotate(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append([]jose.JSONWebKey{{Key: priv, KeyID: "k" + string(rune('a'+len(p.keys))), Algorithm: "ES256", Use: "sig"}}, p.keys...)
}

func (p *oidcProvider) token(t *testing.T, claims map[string]any) string {
	p.mu.Lock()
	key := p.keys[0]
	p.mu.Unlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	std := jwt.Claims{Issuer: p.srv.URL, Subject: "entra-app", Audience: jwt.Audience{"api://lucius"},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour)), IssuedAt: jwt.NewNumericDate(time.Now())}
	tok, err := jwt.Signed(signer).Claims(std).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAuthenticateOIDCIssuerWithKeyRotationAndMappedClaims(t *testing.T) {
	t.Parallel()
	idp := newOIDCProvider(t)
	a, err := NewAuthenticator(Config{IssuerURLs: []string{idp.srv.URL}, Audience: "api://lucius",
		Claims:     ClaimNames{Tenants: "extension_tenants"},
		RoleValues: map[string]Role{"Lucius.Partner": RolePartner}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := a.Authenticate(ctx, idp.token(t, map[string]any{"roles": []string{"Lucius.Partner"}, "extension_tenants": "acme contoso"}))
	if err != nil || !p.CanActFor("contoso") || !p.CanActFor("acme") || p.Operator() {
		t.Fatalf("principal %+v, err %v", p, err)
	}
	idp.rotate(t)
	if _, err := a.Authenticate(ctx, idp.token(t, map[string]any{"roles": "Lucius.Partner", "extension_tenants": []string{"acme"}})); err != nil {
		t.Fatalf("a token of the rotated key: %v", err)
	}
	idp.mu.Lock()
	fetches := idp.jwks
	idp.mu.Unlock()
	if fetches < 2 {
		t.Fatalf("the JWKS was fetched %d times; a new key id must refetch it", fetches)
	}
	other := newOIDCProvider(t)
	if _, err := a.Authenticate(ctx, other.token(t, map[string]any{"roles": "Lucius.Partner"})); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("a token of an unconfigured issuer: %v", err)
	}
}

func FuzzAuthenticate(f *testing.F) {
	dir := f.TempDir()
	li, err := OpenLocalIssuer(dir)
	if err != nil {
		f.Fatal(err)
	}
	a, err := NewAuthenticator(Config{JWKSFile: li.JWKSPath()})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := li.Mint(Grant{Subject: "p", Roles: []Role{RolePartner}, Tenants: []string{"acme"}}, time.Hour)
	for _, s := range []string{good, "", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", good[:len(good)-2]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := a.Authenticate(context.Background(), raw)
		if err == nil && raw != good && (p.Subject != "p" || !p.CanActFor("acme")) {
			t.Fatalf("accepted a token the issuer did not mint: %q → %+v", raw, p)
		}
	})
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
