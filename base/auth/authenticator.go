package auth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Why a credential is refused. The text goes to the caller and the log.
var (
	ErrNoCredentials = errors.New("no bearer token or client certificate")
	ErrUntrusted     = errors.New("token issuer is not trusted")
	ErrInvalidToken  = errors.New("invalid token")
	ErrNoGrant       = errors.New("token grants no Lucius role")
)

// signingAlgs are the algorithms a token may be signed with; never "none"
// or a symmetric one (an issuer's public key is not a secret).
var signingAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384,
	jose.PS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

func algNames() []string {
	out := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = string(a)
	}
	return out
}

// Authenticator turns a bearer token or a client certificate into a Principal.
type Authenticator struct {
	cfg     Config
	issuers map[string]*issuer

	// verified caches principals of tokens already checked, so a worker's
	// or client's token costs one signature check, not one per call.
	mu       sync.Mutex
	verified map[string]verifiedToken
}

type verifiedToken struct {
	p       *Principal
	expires time.Time
}

// Verified tokens are remembered this long at most (and never past their
// expiry), and this many at once.
const (
	verifiedTTL = time.Minute
	verifiedMax = 4096
)

// issuer verifies the tokens of one iss.
type issuer struct {
	name     string
	discover bool // an OIDC issuer URL: discovery on first use
	keys     oidc.KeySet
	cfg      *oidc.Config

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	lastTry  time.Time
}

// NewAuthenticator returns an authenticator for cfg. It fetches nothing yet:
// an OIDC issuer's discovery runs on its first token, so a slow identity
// provider does not keep Lucius from starting.
func NewAuthenticator(cfg Config) (*Authenticator, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg, issuers: map[string]*issuer{}, verified: map[string]verifiedToken{}}
	ocfg := &oidc.Config{ClientID: cfg.Audience, SupportedSigningAlgs: algNames(),
		// go-oidc allows no skew on expiry: verify against a clock running behind.
		Now: func() time.Time { return time.Now().Add(-cfg.ClockSkew) }}
	for _, u := range cfg.IssuerURLs {
		u = strings.TrimSuffix(u, "/")
		a.issuers[u] = &issuer{name: u, discover: true, cfg: ocfg}
	}
	if cfg.JWKSFile != "" {
		if _, err := os.Stat(cfg.JWKSFile); err != nil {
			return nil, fmt.Errorf("JWKS file: %w", err)
		}
		keys := &fileKeySet{path: cfg.JWKSFile}
		a.issuers[cfg.JWKSIssuer] = &issuer{name: cfg.JWKSIssuer, keys: keys, cfg: ocfg,
			verifier: oidc.NewVerifier(cfg.JWKSIssuer, keys, ocfg)}
	}
	return a, nil
}

// Config is the configuration in effect (defaults applied).
func (a *Authenticator) Config() Config { return a.cfg }

// Authenticate verifies a bearer token (signature, issuer, audience, expiry
// with skew) and reads its grants.
func (a *Authenticator) Authenticate(ctx context.Context, raw string) (*Principal, error) {
	now := time.Now()
	a.mu.Lock()
	v, ok := a.verified[raw]
	a.mu.Unlock()
	if ok && now.Before(v.expires) {
		return v.p, nil
	}
	p, expiry, err := a.verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if len(a.verified) >= verifiedMax {
		clear(a.verified)
	}
	until := now.Add(verifiedTTL)
	if expiry.Before(until) {
		until = expiry
	}
	a.verified[raw] = verifiedToken{p: p, expires: until}
	a.mu.Unlock()
	return p, nil
}

func (a *Authenticator) verify(ctx context.Context, raw string) (*Principal, time.Time, error) {
	iss, err := unverifiedIssuer(raw)
	if err != nil {
		return nil, time.Time{}, err
	}
	is, ok := a.issuers[strings.TrimSuffix(iss, "/")]
	if !ok {
		return nil, time.Time{}, ErrUntrusted
	}
	v, err := is.verifierFor(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %s", ErrInvalidToken, strings.TrimPrefix(err.Error(), "oidc: "))
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	p := &Principal{Subject: tok.Subject, Issuer: tok.Issuer}
	for _, v := range stringsClaim(claims[a.cfg.Claims.Roles]) {
		if r, ok := a.role(v); ok && !slices.Contains(p.Roles, r) {
			p.Roles = append(p.Roles, r)
		}
	}
	for _, t := range stringsClaim(claims[a.cfg.Claims.Tenants]) {
		p.Tenants = append(p.Tenants, NormalizeTenant(t))
	}
	for _, s := range stringsClaim(claims[a.cfg.Claims.Services]) {
		p.Services = append(p.Services, strings.ToLower(strings.TrimSpace(s)))
	}
	if len(p.Roles) == 0 {
		return nil, time.Time{}, ErrNoGrant
	}
	return p, tok.Expiry.Add(a.cfg.ClockSkew), nil
}

// AuthenticateCert maps a verified client certificate chain to a principal.
func (a *Authenticator) AuthenticateCert(chains [][]*x509.Certificate) (*Principal, error) {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, ErrNoCredentials
	}
	return a.cfg.ClientCerts.principal(chains[0][0])
}

func (a *Authenticator) role(v string) (Role, bool) {
	if r, ok := a.cfg.RoleValues[v]; ok {
		return r, true
	}
	return ParseRole(v)
}

func (is *issuer) verifierFor(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.verifier != nil {
		return is.verifier, nil
	}
	// Discovery failed recently: do not hammer the provider on every call.
	if time.Since(is.lastTry) < 5*time.Second {
		return nil, fmt.Errorf("issuer %s: discovery failed recently; retry shortly", is.name)
	}
	is.lastTry = time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// The provider's key set outlives this call: give it a client, not ctx's deadline.
	provider, err := oidc.NewProvider(oidc.ClientContext(dctx, &http.Client{Timeout: 10 * time.Second}), is.name)
	if err != nil {
		return nil, fmt.Errorf("issuer %s: discovery: %w", is.name, err)
	}
	is.verifier = provider.VerifierContext(oidc.ClientContext(context.Background(), &http.Client{Timeout: 10 * time.Second}), is.cfg)
	return is.verifier, nil
}

// unverifiedIssuer reads iss to pick the verifier; nothing is trusted yet.
func unverifiedIssuer(raw string) (string, error) {
	tok, err := jwt.ParseSigned(raw, signingAlgs)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var c jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if c.Issuer == "" {
		return "", fmt.Errorf("%w: no iss", ErrInvalidToken)
	}
	return c.Issuer, nil
}

// stringsClaim reads a claim that is an array of strings or one string of
// space- or comma-separated values.
func stringsClaim(v any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		out = strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' })
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && strings.TrimSpace(s) != "" {
				out = append(out, strings.TrimSpace(s))
			}
		}
	}
	return out
}

// fileKeySet verifies signatures with the keys of a JWKS file, re-read when
// its modification time changes (key rotation without a restart).
type fileKeySet struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	checked time.Time
	keys    jose.JSONWebKeySet
}

func (f *fileKeySet) VerifySignature(_ context.Context, raw string) ([]byte, error) {
	sig, err := jose.ParseSignedCompact(raw, signingAlgs)
	if err != nil {
		return nil, err
	}
	if len(sig.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	keys, err := f.load()
	if err != nil {
		return nil, err
	}
	kid := sig.Signatures[0].Header.KeyID
	for _, k := range keys.Keys {
		if kid != "" && k.KeyID != kid || !k.IsPublic() {
			continue
		}
		if payload, err := sig.Verify(k.Key); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("no trusted key verifies the signature")
}

func (f *fileKeySet) load() (jose.JSONWebKeySet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) < time.Second && len(f.keys.Keys) > 0 {
		return f.keys, nil
	}
	f.checked = time.Now()
	st, err := os.Stat(f.path)
	if err != nil {
		return f.keys, fmt.Errorf("JWKS file: %w", err)
	}
	if st.ModTime().Equal(f.modTime) && len(f.keys.Keys) > 0 {
		return f.keys, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return f.keys, fmt.Errorf("JWKS file: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return f.keys, fmt.Errorf("JWKS file %s: %w", f.path, err)
	}
	f.keys, f.modTime = set, st.ModTime()
	return f.keys, nil
}
