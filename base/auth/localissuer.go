package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// LocalIssuer mints tokens for the embedded default, where no external
// identity provider exists: `make up` creates one under .lucius/issuer, the
// services trust its jwks.json (Config.JWKSFile) and `lucius token` mints
// from its signing key. Production trusts an OIDC issuer instead.
type LocalIssuer struct {
	dir string
	key jose.JSONWebKey
}

// Files of a local issuer's directory.
const (
	SigningKeyFile = "signing-key.json" // private, 0600
	JWKSFileName   = "jwks.json"        // public, what services trust
)

// OpenLocalIssuer loads the issuer in dir, creating it (an ECDSA P-256 key)
// when dir holds none. Concurrent first calls agree on one key.
func OpenLocalIssuer(dir string) (*LocalIssuer, error) {
	// Only the issuer's own folder is private: a parent it creates (make
	// up's data folder, when `lucius token` runs first) must stay traversable
	// for the PostgreSQL cluster kept beside it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	keyPath := filepath.Join(dir, SigningKeyFile)
	b, err := os.ReadFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		if err := createLocalKey(dir); err != nil {
			return nil, err
		}
		b, err = os.ReadFile(keyPath)
	}
	if err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	var key jose.JSONWebKey
	if err := json.Unmarshal(b, &key); err != nil || key.IsPublic() || !key.Valid() {
		return nil, fmt.Errorf("local issuer: %s is not a private JWK", keyPath)
	}
	return &LocalIssuer{dir: dir, key: key}, nil
}

// createLocalKey writes a new key and its public set; a key another process
// wrote first wins (the link below fails with ErrExist).
func createLocalKey(dir string) error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	kidBytes := make([]byte, 8)
	_, _ = rand.Read(kidBytes)
	key := jose.JSONWebKey{Key: priv, KeyID: hex.EncodeToString(kidBytes), Algorithm: string(jose.ES256), Use: "sig"}
	privJSON, err := json.Marshal(key)
	if err != nil {
		return err
	}
	pubJSON, err := json.MarshalIndent(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{key.Public()}}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(privJSON); err != nil {
		_ = tmp.Close() // the write failed: that error is the one to report
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// The public set first, so a reader that sees the key sees its set too.
	jwksTmp := tmp.Name() + ".jwks"
	if err := os.WriteFile(jwksTmp, pubJSON, 0o644); err != nil {
		return err
	}
	defer os.Remove(jwksTmp)
	if err := os.Link(tmp.Name(), filepath.Join(dir, SigningKeyFile)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return fmt.Errorf("local issuer: %w", err)
	}
	return os.Rename(jwksTmp, filepath.Join(dir, JWKSFileName))
}

// JWKSPath is the public key set services trust (Config.JWKSFile).
func (l *LocalIssuer) JWKSPath() string { return filepath.Join(l.dir, JWKSFileName) }

// Grant is what a minted token says of its holder.
type Grant struct {
	Subject  string
	Roles    []Role
	Tenants  []string
	Services []string
	// Audience (default DefaultAudience).
	Audience string
}

// Mint signs a token for grant, valid for ttl.
func (l *LocalIssuer) Mint(g Grant, ttl time.Duration) (string, error) {
	if len(g.Roles) == 0 {
		return "", errors.New("mint: a token needs a role")
	}
	if g.Audience == "" {
		g.Audience = DefaultAudience
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: l.key},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	jtiBytes := make([]byte, 12)
	_, _ = rand.Read(jtiBytes)
	std := jwt.Claims{Issuer: LocalIssuerName, Subject: g.Subject, Audience: jwt.Audience{g.Audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
		Expiry: jwt.NewNumericDate(now.Add(ttl)), ID: hex.EncodeToString(jtiBytes)}
	grants := map[string]any{DefaultRolesClaim: g.Roles}
	if len(g.Tenants) > 0 {
		grants[DefaultTenantsClaim] = g.Tenants
	}
	if len(g.Services) > 0 {
		grants[DefaultServicesClaim] = g.Services
	}
	return jwt.Signed(signer).Claims(std).Claims(grants).Serialize()
}
