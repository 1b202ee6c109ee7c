// Package config is Lucius's live configuration (seed 004 §3.5): global
// defaults and per-tenant overrides of the mode, admission limits, allowed
// modes and ref allowlists. PostgreSQL is the source of truth (Store); every
// process keeps a local snapshot that a Watcher refreshes on NOTIFY, so a
// change reaches all of them within a second, without a restart. Protocols
// are workflows, kept by package registry.
package config

import (
	"slices"
	"time"

	"github.com/lucius-platform/lucius/bus/routing"
)

// Global holds the defaults every tenant inherits.
type Global struct {
	// DefaultMode is the mode when neither request nor tenant sets one ("" reads as DEFAULT).
	DefaultMode routing.Mode `json:"default_mode,omitempty"`
	Limits      Limits       `json:"limits"`
	Refs        RefPolicy    `json:"ref_policy"`
	// RetryAfter is the back-off a rejected client is told to wait (0: 1s).
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// RetentionDays is how long finished jobs are kept, for tenants without
	// their own (0: forever).
	RetentionDays int       `json:"retention_days,omitempty"`
	Revision      int64     `json:"-"`
	UpdatedAt     time.Time `json:"-"`
	// UpdatedBy names who made the change (issuer#subject); set it before a Put.
	UpdatedBy string `json:"-"`
}

// Limits bound concurrent jobs (accepted, not yet terminal); 0 means none.
type Limits struct {
	Global int `json:"global,omitempty"`
	// Tenant is each tenant's limit unless its configuration sets one.
	Tenant int `json:"tenant,omitempty"`
	// Lanes bound each mode's jobs, all tenants together.
	Lanes map[routing.Mode]int `json:"lanes,omitempty"`
}

// RefPolicy allowlists what refs may name; an empty list allows anything.
type RefPolicy struct {
	Schemes    []string `json:"schemes,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
	Containers []string `json:"containers,omitempty"`
}

// Tenant overrides the globals for one tenant; zero values inherit.
type Tenant struct {
	TenantID string       `json:"-"` // normalized
	Mode     routing.Mode `json:"mode,omitempty"`
	// MaxActive is the tenant's concurrent job limit: nil inherits, 0 is none.
	MaxActive *int `json:"max_active,omitempty"`
	// AllowedModes restricts the modes the tenant may use (empty: both).
	AllowedModes []routing.Mode `json:"allowed_modes,omitempty"`
	// Refs replaces the global ref policy when set.
	Refs *RefPolicy `json:"ref_policy,omitempty"`
	// WebhookSecrets sign the tenant's completion webhooks (Standard
	// Webhooks, "whsec_" + base64); each one signs every delivery, so a
	// rotation keeps two. None: the tenant's jobs cannot carry a callback_url.
	WebhookSecrets []string `json:"webhook_secrets,omitempty"`
	// RequestRate bounds the tenant's requests to each gateway (nil: none).
	RequestRate *RateLimit `json:"request_rate,omitempty"`
	// KeyRateLimits bound submits sharing the value of an envelope field.
	KeyRateLimits []KeyRateLimit `json:"key_rate_limits,omitempty"`
	// RetentionDays overrides the global retention (nil inherits, 0 is forever).
	RetentionDays *int      `json:"retention_days,omitempty"`
	Revision      int64     `json:"-"`
	UpdatedAt     time.Time `json:"-"`
	// UpdatedBy names who made the change (issuer#subject); set it before a Put.
	UpdatedBy string `json:"-"`
}

// RateLimit is a token bucket: RequestsPerSecond tokens a second, up to
// Burst at once (0: max(1, RequestsPerSecond)).
type RateLimit struct {
	RequestsPerSecond float64 `json:"requests_per_second"`
	Burst             int     `json:"burst,omitempty"`
}

// KeyRateLimit limits submits whose envelope Field (doc_id, correlation_id,
// idempotency_key, request_type or payload.<name>) has the same value.
type KeyRateLimit struct {
	Field string    `json:"field"`
	Rate  RateLimit `json:"rate"`
}

// Snapshot is the whole configuration at one revision.
type Snapshot struct {
	// Revision grows with every change (0: nothing stored yet).
	Revision int64
	Global   Global
	Tenants  map[string]Tenant // by normalized tenant id
	// Pauses are the operators' pauses in force.
	Pauses []Pause
}

// Effective is what applies to one tenant after inheritance.
type Effective struct {
	TenantID string
	// Mode is the tenant's configured mode ("" when it has none: the global
	// default decides, see routing.Resolve).
	Mode         routing.Mode
	GlobalMode   routing.Mode
	MaxActive    int // 0: none
	AllowedModes []routing.Mode
	Refs         RefPolicy
	RetryAfter   time.Duration
	// RetentionDays is how long the tenant's finished jobs are kept (0: forever).
	RetentionDays int
}

// ModeAllowed reports whether the tenant may use m.
func (e Effective) ModeAllowed(m routing.Mode) bool {
	return len(e.AllowedModes) == 0 || slices.Contains(e.AllowedModes, m)
}

// For returns what applies to a tenant (tenant is normalized here).
func (s *Snapshot) For(tenant string) Effective {
	tenant = routing.Normalize(tenant)
	g := s.Global
	e := Effective{TenantID: tenant, GlobalMode: g.DefaultMode, MaxActive: g.Limits.Tenant, Refs: g.Refs, RetryAfter: g.RetryAfter,
		RetentionDays: g.RetentionDays}
	if e.RetryAfter <= 0 {
		e.RetryAfter = time.Second
	}
	t, ok := s.Tenants[tenant]
	if !ok {
		return e
	}
	e.Mode, e.AllowedModes = t.Mode, t.AllowedModes
	if t.MaxActive != nil {
		e.MaxActive = *t.MaxActive
	}
	if t.Refs != nil {
		e.Refs = *t.Refs
	}
	if t.RetentionDays != nil {
		e.RetentionDays = *t.RetentionDays
	}
	return e
}

// Retention is what the retention sweeper keeps: the global retention in
// days and the tenants that set their own (0: forever).
func (s *Snapshot) Retention() (global int, tenants map[string]int) {
	tenants = map[string]int{}
	for id, t := range s.Tenants {
		if t.RetentionDays != nil {
			tenants[id] = *t.RetentionDays
		}
	}
	return s.Global.RetentionDays, tenants
}

// LaneLimit is the limit of a mode's lane (0: none).
func (s *Snapshot) LaneLimit(m routing.Mode) int { return s.Global.Limits.Lanes[m] }
