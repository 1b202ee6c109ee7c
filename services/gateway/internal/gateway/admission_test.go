package gateway

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// staticWorkflows serves the built-in definitions to admission.
type staticWorkflows map[string]*workflow.Definition

func (w staticWorkflows) Latest(id string) (*workflow.Definition, error) {
	if d, ok := w[id]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("workflow %s: %w", id, ledger.ErrNotFound)
}

func (w staticWorkflows) Known() []string {
	var ids []string
	for id := range w {
		ids = append(ids, id)
	}
	return ids
}

func builtinWorkflows(t testing.TB) staticWorkflows {
	t.Helper()
	defs, err := workflow.LoadDir(workflow.BuiltinFiles(), workflow.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	w := staticWorkflows{}
	for _, d := range defs {
		w[d.ID] = d
	}
	return w
}

var testConfig = &config.Snapshot{Global: config.Global{DefaultMode: routing.ModeDefault,
	Refs: config.RefPolicy{Schemes: []string{"file", "https", "az"}}},
	Tenants: map[string]config.Tenant{"acme": {TenantID: "acme", WebhookSecrets: []string{testWebhookSecret}}}}

// testWebhookSecret is the Standard Webhooks specification's example secret.
const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testPolicy confines file refs to /data (which need not exist) and allows
// no internal callback address.
var testPolicy = Policy{Seed: testConfig.Global, FileRoots: config.FileRoots{"/data"}}

func validCommand() *luciusv1.Command {
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"summarize"}, "chunk_size": 100})
	return &luciusv1.Command{TenantId: "Acme", RequestType: "OCR_EMBEDDING_SIS", InputRef: "file:///data/in.txt",
		OutputRef: "file:///data/out.json", Payload: payload, SchemaVersion: "1.0"}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestAdmitDerivesDeterministicRequestKeys(t *testing.T) {
	t.Parallel()
	reg := builtinWorkflows(t)
	id := func(mutate func(c *luciusv1.Command)) string {
		t.Helper()
		c := validCommand()
		mutate(c)
		a, vs, err := admit(c, reg, testConfig, testPolicy)
		if err != nil || vs != nil {
			t.Fatalf("unexpected violations %v", vs)
		}
		if !hex64.MatchString(a.requestKey) {
			t.Fatalf("request key %q is not 64 hex characters", a.requestKey)
		}
		return a.requestKey
	}
	base := id(func(*luciusv1.Command) {})
	if id(func(*luciusv1.Command) {}) != base {
		t.Fatal("the same command gave two request keys")
	}
	if id(func(c *luciusv1.Command) { c.TenantId = "  ACME " }) != base {
		t.Fatal("tenant case and whitespace changed the request key")
	}
	if id(func(c *luciusv1.Command) { c.CorrelationId = "trace-me" }) != base {
		t.Fatal("correlation id changed the request key")
	}
	if id(func(c *luciusv1.Command) { c.SchemaVersion = "1.3" }) != base {
		t.Fatal("a compatible minor schema version changed the request key")
	}
	if id(func(c *luciusv1.Command) { c.InputRef = "file:///data/other.txt" }) == base {
		t.Fatal("a different input gave the same request key")
	}
	reordered, _ := structpb.NewStruct(map[string]any{"chunk_size": 100, "prompt_set": []any{"summarize"}})
	if id(func(c *luciusv1.Command) { c.Payload = reordered }) != base {
		t.Fatal("payload key order changed the request key")
	}
	keyed := id(func(c *luciusv1.Command) { c.IdempotencyKey = "k-1" })
	if keyed == base {
		t.Fatal("an idempotency key did not change how the id is derived")
	}
	if id(func(c *luciusv1.Command) { c.IdempotencyKey = "k-1"; c.InputRef = "file:///data/other.txt" }) != keyed {
		t.Fatal("with a key the id must depend on tenant and key only")
	}
	if id(func(c *luciusv1.Command) { c.IdempotencyKey = "k-1"; c.TenantId = "globex" }) == keyed {
		t.Fatal("two tenants using the same key got the same request key")
	}
}

func TestAdmitRejectsWithSpecificViolations(t *testing.T) {
	t.Parallel()
	reg := builtinWorkflows(t)
	tests := []struct {
		name   string
		mutate func(c *luciusv1.Command)
		field  string
		reason string
	}{
		{"blank tenant", func(c *luciusv1.Command) { c.TenantId = "   " }, "command.tenant_id", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
		{"unknown request type", func(c *luciusv1.Command) { c.RequestType = "TRANSLATE" }, "command.request_type", server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNKNOWN_REQUEST_TYPE)},
		{"future schema version", func(c *luciusv1.Command) { c.SchemaVersion = "2" }, "command.schema_version", server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNSUPPORTED_SCHEMA_VERSION)},
		{"relative input ref", func(c *luciusv1.Command) { c.InputRef = "data/in.txt" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"scheme not allowed", func(c *luciusv1.Command) { c.InputRef = "ftp://host/container/in.txt" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_SCHEME_NOT_ALLOWED)},
		{"file ref with host", func(c *luciusv1.Command) { c.OutputRef = "file://server/out.json" }, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"file ref escaping", func(c *luciusv1.Command) { c.OutputRef = "file:///data/../etc/passwd" }, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"https ref without blob", func(c *luciusv1.Command) { c.InputRef = "https://account.blob.core.windows.net" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"SIS without prompt_set", func(c *luciusv1.Command) { c.Payload, _ = structpb.NewStruct(map[string]any{}) }, "command.payload.prompt_set", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD)},
		{"empty prompt_set", func(c *luciusv1.Command) {
			c.Payload, _ = structpb.NewStruct(map[string]any{"prompt_set": []any{}})
		}, "command.payload.prompt_set", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD)},
		{"BURST without doc_id", func(c *luciusv1.Command) { c.Mode = luciusv1.Mode_MODE_BURST }, "command.doc_id", server.Reason(luciusv1.ErrorReason_ERROR_REASON_BURST_REQUIRES_DOC_ID)},
		{"callback not http", func(c *luciusv1.Command) { c.CallbackUrl = "ftp://x/y" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"file ref outside the roots", func(c *luciusv1.Command) { c.InputRef = "file:///etc/passwd" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS)},
		{"output outside the roots", func(c *luciusv1.Command) { c.OutputRef = "file:///database/out.json" }, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS)},
		{"callback at loopback", func(c *luciusv1.Command) { c.CallbackUrl = "http://127.0.0.1:9000/hook" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN)},
		{"callback at IPv6 loopback", func(c *luciusv1.Command) { c.CallbackUrl = "https://[::1]/hook" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN)},
		{"callback at the metadata address", func(c *luciusv1.Command) { c.CallbackUrl = "http://169.254.169.254/latest" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN)},
		{"callback at a private address", func(c *luciusv1.Command) { c.CallbackUrl = "http://10.0.0.7/hook" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN)},
		{"callback at localhost", func(c *luciusv1.Command) { c.CallbackUrl = "http://localhost:8080/hook" }, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_CALLBACK_URL_FORBIDDEN)},
		{"callback without a webhook secret", func(c *luciusv1.Command) {
			c.TenantId, c.CallbackUrl = "globex", "https://hooks.example.com/x"
		}, "command.callback_url", server.Reason(luciusv1.ErrorReason_ERROR_REASON_WEBHOOK_SECRET_MISSING)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validCommand()
			tt.mutate(c)
			a, vs, err := admit(c, reg, testConfig, testPolicy)
			if err != nil || a != nil || len(vs) == 0 {
				t.Fatalf("accepted an invalid command")
			}
			if vs[0].Field != tt.field || server.Reason(vs[0].Reason) != tt.reason || vs[0].Description == "" {
				t.Fatalf("violation %+v, want field %s reason %s", vs[0], tt.field, tt.reason)
			}
		})
	}
}

// Without file roots every file ref is refused; an allowlisted range opens
// callback URLs in it, and only those.
func TestAdmitAppliesTheEdgePolicy(t *testing.T) {
	t.Parallel()
	reg := builtinWorkflows(t)
	noRoots := testPolicy
	noRoots.FileRoots = nil
	if _, vs, _ := admit(validCommand(), reg, testConfig, noRoots); len(vs) != 2 || vs[0].Reason != luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS {
		t.Errorf("no file roots: %v, want both refs refused", vs)
	}
	loopback := testPolicy
	loopback.Egress.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	// localhost may resolve to ::1, which stays refused.
	for cb, ok := range map[string]bool{"http://127.0.0.1:9000/hook": true, "http://localhost:9000/hook": false,
		"http://[::1]:9000/hook": false, "http://169.254.169.254/": false, "https://hooks.example.com/x": true} {
		c := validCommand()
		c.CallbackUrl = cb
		if _, vs, _ := admit(c, reg, testConfig, loopback); ok != (len(vs) == 0) {
			t.Errorf("loopback allowlisted, callback %s: %v, want accepted %v", cb, vs, ok)
		}
	}
}

func TestAdmitReportsEveryViolationAtOnce(t *testing.T) {
	t.Parallel()
	c := validCommand()
	c.SchemaVersion, c.InputRef, c.Payload = "9", "nope", &structpb.Struct{}
	_, vs, _ := admit(c, builtinWorkflows(t), testConfig, testPolicy)
	fields := map[string]bool{}
	for _, v := range vs {
		fields[v.Field] = true
	}
	for _, f := range []string{"command.schema_version", "command.input_ref", "command.payload.prompt_set"} {
		if !fields[f] {
			t.Errorf("no violation for %s in %v", f, vs)
		}
	}
}

func TestBurstRoutesOnTenantAndDocument(t *testing.T) {
	t.Parallel()
	c := validCommand()
	c.Mode, c.DocId = luciusv1.Mode_MODE_BURST, " Doc-7 "
	a, vs, err := admit(c, builtinWorkflows(t), testConfig, testPolicy)
	if err != nil || vs != nil {
		t.Fatal(vs)
	}
	if a.route.RoutingKey != "acmedoc-7" || a.route.Source != routing.SourceRequest || !strings.HasPrefix(a.route.Topic, "global-burst-p") {
		t.Fatalf("route %+v", a.route)
	}
}

// FuzzAdmit: any command is either rejected with violations naming command
// fields, or admitted with a 64-hex job id; never both, never a panic.
func FuzzAdmit(f *testing.F) {
	seed, _ := proto.Marshal(validCommand())
	f.Add(seed)
	f.Add([]byte{})
	reg := builtinWorkflows(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := &luciusv1.Command{}
		if proto.Unmarshal(raw, c) != nil {
			return
		}
		a, vs, err := admit(c, reg, testConfig, testPolicy)
		if err != nil {
			t.Fatal(err)
		}
		if (a == nil) == (len(vs) == 0) {
			t.Fatalf("admit returned %v and %d violations", a, len(vs))
		}
		for _, v := range vs {
			if !strings.HasPrefix(v.Field, "command.") || v.Reason == luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED || v.Description == "" {
				t.Fatalf("bad violation %+v", v)
			}
		}
		if a != nil && (!hex64.MatchString(a.requestKey) || !hex64.MatchString(a.hash)) {
			t.Fatalf("bad ids %q %q", a.requestKey, a.hash)
		}
	})
}

// The tenant's configuration decides its mode, allowed modes, ref policy and
// limits; the request's own mode still comes first.
func TestAdmitAppliesTheTenantConfiguration(t *testing.T) {
	t.Parallel()
	two := 2
	snap := &config.Snapshot{
		Global: config.Global{DefaultMode: routing.ModeDefault, Refs: config.RefPolicy{Schemes: []string{"file", "https", "az"}},
			Limits: config.Limits{Global: 100, Tenant: 10, Lanes: map[routing.Mode]int{routing.ModeBurst: 20}}},
		Tenants: map[string]config.Tenant{
			"bursty":     {TenantID: "bursty", Mode: routing.ModeBurst, MaxActive: &two},
			"steady":     {TenantID: "steady", AllowedModes: []routing.Mode{routing.ModeDefault}},
			"only-burst": {TenantID: "only-burst", AllowedModes: []routing.Mode{routing.ModeBurst}},
			"locked": {TenantID: "locked", Refs: &config.RefPolicy{Schemes: []string{"az"}, Hosts: []string{"lockedacct"},
				Containers: []string{"bronze"}}},
		}}
	tests := []struct {
		name   string
		mutate func(c *luciusv1.Command)
		// want: the mode and its source, or the violation's field and reason
		mode   routing.Mode
		source routing.Source
		limits ledger.Limits
		field  string
		reason string
	}{
		{"the global default", func(c *luciusv1.Command) {}, routing.ModeDefault, routing.SourceGlobalConfig,
			ledger.Limits{Tenant: 10, Global: 100}, "", ""},
		{"the tenant's mode", func(c *luciusv1.Command) { c.TenantId, c.DocId = "Bursty", "d1" }, routing.ModeBurst,
			routing.SourceTenantConfig, ledger.Limits{Tenant: 2, Lane: 20, Global: 100}, "", ""},
		{"the request over the tenant", func(c *luciusv1.Command) { c.TenantId, c.Mode = "bursty", luciusv1.Mode_MODE_DEFAULT },
			routing.ModeDefault, routing.SourceRequest, ledger.Limits{Tenant: 2, Global: 100}, "", ""},
		{"the tenant's mode still needs a doc", func(c *luciusv1.Command) { c.TenantId = "bursty" }, "", "", ledger.Limits{},
			"command.doc_id", server.Reason(luciusv1.ErrorReason_ERROR_REASON_BURST_REQUIRES_DOC_ID)},
		{"BURST not allowed", func(c *luciusv1.Command) { c.TenantId, c.Mode, c.DocId = "steady", luciusv1.Mode_MODE_BURST, "d" },
			"", "", ledger.Limits{}, "command.mode", server.Reason(luciusv1.ErrorReason_ERROR_REASON_BURST_FORBIDDEN)},
		{"DEFAULT not allowed", func(c *luciusv1.Command) { c.TenantId = "only-burst" }, "", "", ledger.Limits{},
			"command.mode", server.Reason(luciusv1.ErrorReason_ERROR_REASON_MODE_FORBIDDEN)},
		{"the tenant's refs: scheme", func(c *luciusv1.Command) { c.TenantId = "locked" }, "", "", ledger.Limits{},
			"command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_SCHEME_NOT_ALLOWED)},
		{"the tenant's refs: account", func(c *luciusv1.Command) {
			c.TenantId, c.InputRef, c.OutputRef = "locked", "az://otheracct/bronze/in.pdf", "az://lockedacct/bronze/out.json"
		}, "", "", ledger.Limits{}, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_HOST_NOT_ALLOWED)},
		{"the tenant's refs: container", func(c *luciusv1.Command) {
			c.TenantId, c.InputRef, c.OutputRef = "locked", "az://lockedacct/bronze/in.pdf", "az://lockedacct/gold/out.json"
		}, "", "", ledger.Limits{}, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED)},
		{"the tenant's refs allow", func(c *luciusv1.Command) {
			c.TenantId, c.InputRef, c.OutputRef = "locked", "az://lockedacct/bronze/in.pdf", "az://lockedacct/bronze/out.json"
		}, routing.ModeDefault, routing.SourceGlobalConfig, ledger.Limits{Tenant: 10, Global: 100}, "", ""},
	}
	reg := builtinWorkflows(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validCommand()
			tt.mutate(c)
			a, vs, err := admit(c, reg, snap, testPolicy)
			if err != nil {
				t.Fatal(err)
			}
			if tt.field != "" {
				if a != nil || len(vs) == 0 || vs[0].Field != tt.field || server.Reason(vs[0].Reason) != tt.reason {
					t.Fatalf("violations %+v, want %s %s", vs, tt.field, tt.reason)
				}
				return
			}
			if a == nil {
				t.Fatalf("refused: %+v", vs)
			}
			if a.route.Mode != tt.mode || a.route.Source != tt.source || a.limits != tt.limits {
				t.Fatalf("route %+v limits %+v, want %s from %s with %+v", a.route, a.limits, tt.mode, tt.source, tt.limits)
			}
		})
	}
}

// The canonical form is RFC 8785 JSON: sorted keys, no insignificant space,
// no HTML escaping, ES6 numbers; equal commands written differently agree.
func TestCanonicalFormIsJCS(t *testing.T) {
	t.Parallel()
	payload, _ := structpb.NewStruct(map[string]any{"z": 1.0, "a": []any{"<b>", 2.5, 1e21}})
	cmd := &luciusv1.Command{TenantId: "acme", RequestType: "OCR", InputRef: "file:///in?a=1&b=2", OutputRef: "file:///out",
		Payload: payload, SchemaVersion: "1.2", CallbackUrl: "https://example.com/cb?x=1&y=2"}
	want := `{"callback_url":"https://example.com/cb?x=1&y=2","doc_id":"","input_ref":"file:///in?a=1&b=2",` +
		`"mode":"MODE_UNSPECIFIED","output_ref":"file:///out","payload":{"a":["<b>",2.5,1e+21],"z":1},` +
		`"request_type":"OCR","schema_version":"1","tenant_id":"acme"}`
	if got := canonicalForm(cmd, "acme"); got != want {
		t.Fatalf("canonical form\n got %s\nwant %s", got, want)
	}
}
