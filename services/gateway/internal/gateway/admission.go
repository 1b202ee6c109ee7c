package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/routing"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/workflow"
)

// SupportedSchemaMajor is the envelope major version this gateway accepts (1.x).
const SupportedSchemaMajor = "1"

// Policy holds the admission rules that are configuration rather than contract.
type Policy struct {
	// RefSchemes are the URL schemes accepted for input_ref and output_ref.
	RefSchemes []string
	// DefaultMode is the global default lane when neither request nor tenant set one.
	DefaultMode routing.Mode
	Topology    routing.Topology
}

// admitted is a command that passed every rule, with what admission derived.
type admitted struct {
	cmd      *luciusv1.Command
	tenant   string // normalized
	workflow *workflow.Definition
	route    routing.Decision
	jobID    string
	hash     string
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
// and allowed by policy, the workflow's input declarations, and the routing
// rule. It returns every violation at once.
func admit(cmd *luciusv1.Command, workflows Workflows, policy Policy) (*admitted, []server.Violation, error) {
	var vs []server.Violation
	add := func(field, reason, format string, args ...any) {
		vs = append(vs, server.Violation{Field: "command." + field, Reason: reason, Description: fmt.Sprintf(format, args...)})
	}
	tenant := routing.Normalize(cmd.GetTenantId())
	if tenant == "" {
		add("tenant_id", server.ReasonInvalidArgument, "must not be blank")
	}
	if major, _, _ := strings.Cut(cmd.GetSchemaVersion(), "."); major != SupportedSchemaMajor {
		add("schema_version", server.ReasonUnsupportedSchema, "version %q is not supported; this gateway accepts %s.x", cmd.GetSchemaVersion(), SupportedSchemaMajor)
	}
	def, err := workflows.Latest(cmd.GetRequestType())
	known := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return nil, nil, err
	}
	if !known {
		add("request_type", server.ReasonUnknownRequestType, "unknown request type %q; known: %s", cmd.GetRequestType(), strings.Join(workflows.Known(), ", "))
	}
	for _, ref := range []struct{ field, value string }{{"input_ref", cmd.GetInputRef()}, {"output_ref", cmd.GetOutputRef()}} {
		if problem := checkRef(ref.value, policy.RefSchemes); problem != "" {
			add(ref.field, server.ReasonInvalidRef, "%s", problem)
		}
	}
	if cb := cmd.GetCallbackUrl(); cb != "" {
		if u, err := url.Parse(cb); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("callback_url", server.ReasonInvalidRef, "must be an absolute http or https URL")
		}
	}
	if known {
		_, violations := def.Bind(cmd.GetPayload().AsMap())
		for _, v := range violations {
			vs = append(vs, server.Violation{Field: "command." + v.Field, Reason: server.ReasonInvalidPayload, Description: v.Description})
		}
	}
	var requested routing.Mode
	switch cmd.GetMode() {
	case luciusv1.Mode_MODE_DEFAULT:
		requested = routing.ModeDefault
	case luciusv1.Mode_MODE_BURST:
		requested = routing.ModeBurst
	}
	route, rerr := routing.Resolve(routing.Input{TenantID: cmd.GetTenantId(), DocID: cmd.GetDocId(), Requested: requested,
		GlobalDefault: policy.DefaultMode, Topology: policy.Topology})
	switch rerr {
	case nil:
	case routing.ErrBurstWithoutDocID:
		add("doc_id", server.ReasonBurstWithoutDocID, "is required in BURST mode: it spreads the tenant's work over partitions")
	case routing.ErrBurstForbidden:
		add("mode", server.ReasonBurstForbidden, "tenant %q may not use BURST mode", tenant)
	case routing.ErrEmptyTenant:
		// reported above
	default:
		add("mode", server.ReasonInvalidArgument, "%v", rerr)
	}
	if len(vs) > 0 {
		return nil, vs, nil
	}
	canonical := canonicalForm(cmd, tenant)
	hash := sha256Hex("lucius/request/v1\n" + canonical)
	jobID := sha256Hex("lucius/job/v1/canonical\n" + canonical)
	if key := cmd.GetIdempotencyKey(); key != "" {
		jobID = sha256Hex("lucius/job/v1/key\n" + tenant + "\n" + key)
	}
	return &admitted{cmd: cmd, tenant: tenant, workflow: def, route: route, jobID: jobID, hash: hash}, nil, nil
}

// canonicalForm is the command as JSON with sorted keys and the tenant
// normalized: what makes two commands "the same request". The idempotency key and
// correlation id are excluded (they name or trace a request, they do not change
// its work); the schema version counts only by its major version.
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
	b, _ := json.Marshal(form) // maps marshal with sorted keys
	return string(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// checkRef validates a ref against the policy; it returns a problem or "".
func checkRef(ref string, schemes []string) string {
	u, err := url.Parse(ref)
	if err != nil || u.Scheme == "" {
		return "must be an absolute URL such as file:///data/in.pdf or https://host/container/blob"
	}
	allowed := false
	for _, s := range schemes {
		allowed = allowed || strings.EqualFold(s, u.Scheme)
	}
	if !allowed {
		return fmt.Sprintf("scheme %q is not allowed; allowed: %s", u.Scheme, strings.Join(schemes, ", "))
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return "file URLs must not name a host (file:///absolute/path)"
		}
		if !path.IsAbs(u.Path) || u.Path == "/" || strings.Contains(u.Path, "/../") || strings.HasSuffix(u.Path, "/..") {
			return "file URLs need an absolute path without .. segments"
		}
	default:
		if u.Host == "" {
			return fmt.Sprintf("%s URLs must name a host", u.Scheme)
		}
		if u.Path == "" || u.Path == "/" {
			return fmt.Sprintf("%s URLs must name a container and blob path", u.Scheme)
		}
	}
	return ""
}
