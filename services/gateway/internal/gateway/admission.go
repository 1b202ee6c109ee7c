package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// SupportedSchemaMajor is the envelope major version this gateway accepts (1.x).
const SupportedSchemaMajor = "1"

// Policy holds what admission needs besides the live configuration.
type Policy struct {
	// Seed is the global configuration stored when the database has none yet
	// (from LUCIUS_DEFAULT_MODE and LUCIUS_REF_SCHEMES); after that the stored
	// configuration rules, changed through the ConfigService.
	Seed     config.Global
	Topology routing.Topology
	// Payload bounds a command's payload (checked before admission's rules).
	Payload PayloadLimits
	// FileRoots confine file:// refs (LUCIUS_FILE_ROOTS); empty refuses them all.
	FileRoots config.FileRoots
	// Egress judges callback_url hosts that are literal addresses
	// (LUCIUS_EGRESS_ALLOW); the reconciler's dialer judges the rest when it
	// delivers.
	Egress egress.Policy
	// MaxKeyLimiters bounds the per-key rate buckets this gateway keeps
	// (default DefaultMaxKeyLimiters).
	MaxKeyLimiters int
}

// admitted is a command that passed every rule, with what admission derived.
type admitted struct {
	cmd      *luciusv1.Command
	tenant   string // normalized
	workflow *workflow.Definition
	route    routing.Decision
	// requestKey is what makes two commands the same request (the tenant and
	// idempotency key, or the canonical command); the job id is minted at
	// acceptance (ledger.NewJobID).
	requestKey string
	hash       string
	// asset is the asset the command names (empty AssetID: none).
	asset ledger.AssetRef
	// limits are the admission limits of the command's tenant and lane.
	limits     ledger.Limits
	retryAfter time.Duration
}

// Workflows finds the workflow a request type names (its latest version; an
// error wrapping ledger.ErrNotFound when there is none), and lists known
// request types for the error message.
type Workflows interface {
	Latest(requestType string) (*workflow.Definition, error)
	Known() []string
}

// admit applies the rules protovalidate annotations cannot express: tenant not
// blank, schema version compatibility, a known request type, refs well-formed
// and allowed by the tenant's ref policy, the workflow's input declarations,
// and the routing rule with the tenant's mode settings; file refs inside the
// file roots and a callback_url at no forbidden address. It returns every
// violation at once.
func admit(cmd *luciusv1.Command, workflows Workflows, cfg *config.Snapshot, pol Policy) (*admitted, []server.Violation, error) {
	var vs []server.Violation
	add := func(field string, reason luciusv1.ErrorReason, format string, args ...any) {
		vs = append(vs, server.Violation{Field: "command." + field, Reason: reason, Description: fmt.Sprintf(format, args...)})
	}
	tenant := routing.Normalize(cmd.GetTenantId())
	if tenant == "" {
		add("tenant_id", luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "must not be blank")
	}
	eff := cfg.For(tenant)
	if major, _, _ := strings.Cut(cmd.GetSchemaVersion(), "."); major != SupportedSchemaMajor {
		add("schema_version", luciusv1.ErrorReason_ERROR_REASON_UNSUPPORTED_SCHEMA_VERSION, "version %q is not supported; this gateway accepts %s.x", cmd.GetSchemaVersion(), SupportedSchemaMajor)
	}
	def, err := workflows.Latest(cmd.GetRequestType())
	known := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return nil, nil, err
	}
	if !known {
		add("request_type", luciusv1.ErrorReason_ERROR_REASON_UNKNOWN_REQUEST_TYPE, "unknown request type %q; known: %s", cmd.GetRequestType(), strings.Join(workflows.Known(), ", "))
	}
	for _, ref := range []struct{ field, value string }{{"input_ref", cmd.GetInputRef()}, {"output_ref", cmd.GetOutputRef()}} {
		problem := eff.Refs.CheckRef(ref.value)
		if r, _ := config.ParseRef(ref.value); problem == nil && r.Scheme == "file" {
			problem = pol.FileRoots.Check(r.Path)
		}
		if problem != nil {
			add(ref.field, problem.Reason, "%s", problem.Description)
		}
	}
	if cb := cmd.GetCallbackUrl(); cb != "" {
		if u, err := url.Parse(cb); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("callback_url", luciusv1.ErrorReason_ERROR_REASON_INVALID_REF, "must be an absolute http or https URL")
		} else if err := pol.Egress.CheckURL(u); err != nil {
			add("callback_url", luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN, "%v", err)
		} else if len(cfg.Tenants[tenant].WebhookSecrets) == 0 {
			// Completion webhooks are always signed; refusing now beats a
			// callback abandoned at delivery.
			add("callback_url", luciusv1.ErrorReason_ERROR_REASON_WEBHOOK_SECRET_MISSING, "tenant %q has no webhook secret to sign completion webhooks with; "+
				"an operator sets webhook_secrets in its tenant configuration first", tenant)
		}
	}
	if len(cmd.GetPlatformRefs()) > 0 && cmd.GetPlatformId() == "" {
		add("platform_id", luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "is required with platform_refs: together they name the asset")
	}
	if known {
		_, violations := def.Bind(cmd.GetPayload().AsMap())
		for _, v := range violations {
			vs = append(vs, server.Violation{Field: "command." + v.Field, Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD, Description: v.Description})
		}
	}
	requested := modeFromProto(cmd.GetMode())
	route, rerr := routing.Resolve(routing.Input{TenantID: cmd.GetTenantId(), DocID: cmd.GetDocId(), Requested: requested,
		TenantDefault: eff.Mode, GlobalDefault: eff.GlobalMode, BurstForbidden: !eff.ModeAllowed(routing.ModeBurst),
		Topology: pol.Topology})
	switch rerr {
	case nil:
		if !eff.ModeAllowed(route.Mode) {
			add("mode", luciusv1.ErrorReason_ERROR_REASON_MODE_FORBIDDEN, "tenant %q may not use %s mode (%s); allowed: %v", tenant, route.Mode, route.Reason, eff.AllowedModes)
		}
	case routing.ErrBurstWithoutDocID:
		add("doc_id", luciusv1.ErrorReason_ERROR_REASON_BURST_REQUIRES_DOC_ID, "is required in BURST mode: it spreads the tenant's work over partitions")
	case routing.ErrBurstForbidden:
		add("mode", luciusv1.ErrorReason_ERROR_REASON_BURST_FORBIDDEN, "tenant %q may not use BURST mode", tenant)
	case routing.ErrEmptyTenant:
		// reported above
	default:
		add("mode", luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "%v", rerr)
	}
	if len(vs) > 0 {
		return nil, vs, nil
	}
	canonical := canonicalForm(cmd, tenant)
	hash := sha256Hex("lucius/request/v1\n" + canonical)
	// The prefixes are those of the job ids these keys once were: requests
	// stored before ids were minted (migration 0015) keep matching.
	requestKey := sha256Hex("lucius/job/v1/canonical\n" + canonical)
	if key := cmd.GetIdempotencyKey(); key != "" {
		requestKey = sha256Hex("lucius/job/v1/key\n" + tenant + "\n" + key)
	}
	limits := ledger.Limits{Tenant: eff.MaxActive, Lane: cfg.LaneLimit(route.Mode), Global: cfg.Global.Limits.Global}
	a := &admitted{cmd: cmd, tenant: tenant, workflow: def, route: route, requestKey: requestKey, hash: hash,
		limits: limits, retryAfter: eff.RetryAfter}
	if id := cmd.GetPlatformId(); id != "" {
		a.asset = ledger.AssetRef{AssetID: ledger.AssetIDOf(id, cmd.GetPlatformRefs()), PlatformID: id, PlatformRefs: cmd.GetPlatformRefs()}
	}
	return a, nil, nil
}

// canonicalForm is the command in RFC 8785 canonical JSON (JCS: sorted keys,
// no insignificant whitespace, minimal escapes, ES6 numbers) with the tenant
// normalized: what makes two commands "the same request". The idempotency key,
// correlation id and priority are excluded (they name, trace or order a
// request, they do not change its work); the schema version counts only by
// its major version.
func canonicalForm(cmd *luciusv1.Command, tenant string) string {
	major, _, _ := strings.Cut(cmd.GetSchemaVersion(), ".")
	form := map[string]any{
		"tenant_id":      tenant,
		"request_type":   cmd.GetRequestType(),
		"mode":           cmd.GetMode().String(),
		"input_ref":      cmd.GetInputRef(),
		"output_ref":     cmd.GetOutputRef(),
		"payload":        cmd.GetPayload().AsMap(),
		"schema_version": major,
		"doc_id":         strings.TrimSpace(cmd.GetDocId()),
		"callback_url":   cmd.GetCallbackUrl(),
	}
	if id := cmd.GetPlatformId(); id != "" { // only when set: older commands keep their job ids
		form["platform_id"], form["platform_refs"] = id, cmd.GetPlatformRefs()
	}
	b, _ := json.Marshal(form) // maps, strings and numbers: cannot fail
	canonical, err := jcs.Transform(b)
	if err != nil {
		panic("gateway: canonical form of a command: " + err.Error()) // json.Marshal's output is JSON
	}
	return string(canonical)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
