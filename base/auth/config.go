package auth

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// LocalIssuerName is the iss of tokens the local issuer mints.
const LocalIssuerName = "lucius-local"

// DefaultAudience is the aud Lucius expects when none is configured.
const DefaultAudience = "lucius"

// Config says which callers Lucius trusts. Zero values take the defaults
// noted; at least one of IssuerURLs, JWKSFile or ClientCerts must be set,
// or nothing but the health checks can be called.
type Config struct {
	// IssuerURLs are OIDC issuers (for Microsoft Entra ID,
	// https://login.microsoftonline.com/<tenant-id>/v2.0). Each one's
	// discovery document is fetched on first use and its JWKS cached; a token
	// signed by a key the cache lacks refetches it (key rotation).
	IssuerURLs []string
	// JWKSFile is a JSON Web Key Set trusted for tokens whose iss is
	// JWKSIssuer: the local issuer's jwks.json on the embedded default. The
	// file is re-read when it changes.
	JWKSFile string
	// JWKSIssuer is the iss JWKSFile vouches for (default LocalIssuerName).
	JWKSIssuer string
	// Audience every token must carry in aud (default DefaultAudience; for
	// Entra ID, the API's application ID URI or client id).
	Audience string
	// Claims name where tokens carry tenants, roles and services.
	Claims ClaimNames
	// RoleValues maps a roles-claim value to a role (e.g. Entra app role
	// "Lucius.Partner" → partner). Values that equal a role's name always map
	// to it, case-insensitively.
	RoleValues map[string]Role
	// ClockSkew is allowed on expiry (default 1m).
	ClockSkew time.Duration
	// ClientCerts maps verified mTLS client certificates to principals.
	ClientCerts CertIdentities
}

// ClaimNames name the claims a token carries its grants in. A claim may be
// a JSON array of strings or one string of space- or comma-separated values.
type ClaimNames struct {
	Tenants  string // default "lucius_tenants"
	Roles    string // default "roles" (Entra ID app roles)
	Services string // default "lucius_services"
}

// Default claim names.
const (
	DefaultTenantsClaim  = "lucius_tenants"
	DefaultRolesClaim    = "roles"
	DefaultServicesClaim = "lucius_services"
)

func (c *Config) defaults() {
	if c.JWKSIssuer == "" {
		c.JWKSIssuer = LocalIssuerName
	}
	if c.Audience == "" {
		c.Audience = DefaultAudience
	}
	if c.Claims.Tenants == "" {
		c.Claims.Tenants = DefaultTenantsClaim
	}
	if c.Claims.Roles == "" {
		c.Claims.Roles = DefaultRolesClaim
	}
	if c.Claims.Services == "" {
		c.Claims.Services = DefaultServicesClaim
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = time.Minute
	}
}

// Validate reports invalid settings.
func (c Config) Validate() error {
	var errs []error
	for _, u := range c.IssuerURLs {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "https" && !(pu.Scheme == "http" && isLoopbackHost(pu.Hostname())) || pu.Host == "" {
			errs = append(errs, fmt.Errorf("issuer URL %q: want https://host/... (http only for loopback)", u))
		}
	}
	if c.ClockSkew < 0 || c.ClockSkew > 10*time.Minute {
		errs = append(errs, fmt.Errorf("clock skew %v: want 0 to 10m", c.ClockSkew))
	}
	for v, r := range c.RoleValues {
		if _, ok := ParseRole(string(r)); !ok {
			errs = append(errs, fmt.Errorf("role value %q maps to unknown role %q", v, r))
		}
	}
	return errors.Join(errs...)
}

// ParseRoleValues reads "value=role,value=role" (e.g.
// "Lucius.Partner=partner,Lucius.Operator=operator").
func ParseRoleValues(s string) (map[string]Role, error) {
	out := map[string]Role{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		v, r, ok := strings.Cut(pair, "=")
		role, known := ParseRole(r)
		if !ok || strings.TrimSpace(v) == "" || !known {
			return nil, fmt.Errorf("role value %q: want value=partner|operator|worker", pair)
		}
		out[strings.TrimSpace(v)] = role
	}
	return out, nil
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}
