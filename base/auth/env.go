package auth

import (
	"time"

	"github.com/lucius-platform/lucius/base/env"
)

// ReadConfig reads what a service trusts from the environment (called by
// the service's main):
//
//	LUCIUS_AUTH_ISSUERS         OIDC issuer URLs, comma-separated (Entra ID:
//	                            https://login.microsoftonline.com/<tenant>/v2.0)
//	LUCIUS_AUTH_AUDIENCE        required aud (default "lucius")
//	LUCIUS_AUTH_JWKS_FILE       a trusted JWKS file (make up: .lucius/issuer/jwks.json)
//	LUCIUS_AUTH_JWKS_ISSUER     the iss that file vouches for (default "lucius-local")
//	LUCIUS_AUTH_TENANTS_CLAIM   claim with the tenants (default "lucius_tenants")
//	LUCIUS_AUTH_ROLES_CLAIM     claim with the roles (default "roles")
//	LUCIUS_AUTH_SERVICES_CLAIM  claim with a worker's services (default "lucius_services")
//	LUCIUS_AUTH_ROLE_VALUES     claim values to roles, e.g. "Lucius.Partner=partner"
//	LUCIUS_AUTH_CLOCK_SKEW      allowed skew on expiry (default 1m)
//	LUCIUS_MTLS_IDENTITIES      client certificate CNs to grants, e.g. "ops=operator"
func ReadConfig(e *env.Reader) (Config, error) {
	cfg := Config{
		IssuerURLs: e.List("LUCIUS_AUTH_ISSUERS", nil),
		Audience:   e.String("LUCIUS_AUTH_AUDIENCE", DefaultAudience),
		JWKSFile:   e.String("LUCIUS_AUTH_JWKS_FILE", ""),
		JWKSIssuer: e.String("LUCIUS_AUTH_JWKS_ISSUER", LocalIssuerName),
		Claims: ClaimNames{
			Tenants:  e.String("LUCIUS_AUTH_TENANTS_CLAIM", DefaultTenantsClaim),
			Roles:    e.String("LUCIUS_AUTH_ROLES_CLAIM", DefaultRolesClaim),
			Services: e.String("LUCIUS_AUTH_SERVICES_CLAIM", DefaultServicesClaim),
		},
		ClockSkew: e.Duration("LUCIUS_AUTH_CLOCK_SKEW", time.Minute),
	}
	var err error
	if cfg.RoleValues, err = ParseRoleValues(e.String("LUCIUS_AUTH_ROLE_VALUES", "")); err != nil {
		return cfg, err
	}
	if cfg.ClientCerts, err = ParseCertIdentities(e.String("LUCIUS_MTLS_IDENTITIES", "")); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// ReadCallbackKeys loads LUCIUS_CALLBACK_KEYS_FILE (required where
// directives are dispatched or callbacks served: orchestrators and the
// reconciler), a ParseCallbackKeys file shared by those processes.
func ReadCallbackKeys(e *env.Reader) *CallbackKeys {
	path := e.Required("LUCIUS_CALLBACK_KEYS_FILE")
	if path == "" {
		return nil
	}
	keys, err := LoadCallbackKeys(path)
	e.Fail(err)
	return keys
}
