package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
)

// rateFixture is a rateLimits over a configuration the test changes and a
// clock it moves.
type rateFixture struct {
	snap atomic.Pointer[config.Snapshot]
	now  time.Time
	l    *rateLimits
}

func newRateFixture(maxKeys int, tenants map[string]config.Tenant) *rateFixture {
	f := &rateFixture{now: time.Unix(1_700_000_000, 0)}
	f.set(tenants)
	f.l = newRateLimits(f.snap.Load, maxKeys)
	f.l.now = func() time.Time { return f.now }
	return f
}

// allow takes a token of one tenant's rate: refused with the delay to wait.
func (f *rateFixture) allow(t *testing.T, tenant string) (bool, time.Duration) {
	t.Helper()
	st := f.l.allowTenants([]string{tenant})
	if st == nil {
		return true, 0
	}
	reason, delay := reasonAndDelay(t, st)
	if reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED) {
		t.Fatalf("reason %s, want %s", reason, server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED))
	}
	return false, delay
}

func (f *rateFixture) set(tenants map[string]config.Tenant) {
	f.snap.Store(&config.Snapshot{Tenants: tenants})
}

func submitOf(tenant, docID string, payload map[string]any) *luciusv1.Command {
	p, _ := structpb.NewStruct(payload)
	return &luciusv1.Command{TenantId: tenant, DocId: docID, RequestType: "OCR", Payload: p}
}

// reasonAndDelay reads a refusal's ErrorInfo reason and RetryInfo delay.
func reasonAndDelay(t *testing.T, st *status.Status) (string, time.Duration) {
	t.Helper()
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("refusal %v, want RESOURCE_EXHAUSTED", st)
	}
	var reason string
	var delay time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			delay = d.GetRetryDelay().AsDuration()
		}
	}
	return reason, delay
}

func TestTenantRateIsATokenBucketThatFollowsTheConfiguration(t *testing.T) {
	t.Parallel()
	f := newRateFixture(0, map[string]config.Tenant{"acme": {RequestRate: &config.RateLimit{RequestsPerSecond: 1, Burst: 2}}})
	for i := range 2 {
		if ok, _ := f.allow(t, " ACME "); !ok {
			t.Fatalf("call %d within the burst refused", i+1)
		}
	}
	ok, wait := f.allow(t, "acme")
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("over the burst: %v, retry after %v; want refused for at most 1s", ok, wait)
	}
	if ok, _ := f.allow(t, "globex"); !ok {
		t.Fatal("a tenant without a rate was refused")
	}
	f.now = f.now.Add(time.Second)
	if ok, _ := f.allow(t, "acme"); !ok {
		t.Fatal("refused after the bucket refilled")
	}
	if ok, _ := f.allow(t, "acme"); ok {
		t.Fatal("a refill of one token allowed two calls")
	}
	// A faster rate applies from the next call on; removing it lifts the limit.
	f.set(map[string]config.Tenant{"acme": {RequestRate: &config.RateLimit{RequestsPerSecond: 100, Burst: 1}}})
	if ok, wait := f.allow(t, "acme"); ok || wait > 10*time.Millisecond {
		t.Fatalf("after raising the rate to 100/s: %v, retry after %v; want refused for at most 10ms", ok, wait)
	}
	f.now = f.now.Add(10 * time.Millisecond)
	if ok, wait := f.allow(t, "acme"); !ok {
		t.Fatalf("the raised rate did not apply: retry after %v", wait)
	}
	f.set(map[string]config.Tenant{"acme": {}})
	for range 10 {
		if ok, _ := f.allow(t, "acme"); !ok {
			t.Fatal("refused after the rate was removed")
		}
	}
	if len(f.l.tenants) != 0 {
		t.Errorf("%d tenant buckets kept after the rate was removed", len(f.l.tenants))
	}
}

func TestKeyRatesLimitSubmitsSharingAFieldValue(t *testing.T) {
	t.Parallel()
	f := newRateFixture(0, map[string]config.Tenant{"acme": {KeyRateLimits: []config.KeyRateLimit{
		{Field: "doc_id", Rate: config.RateLimit{RequestsPerSecond: 0.5}},
		{Field: "payload.scene", Rate: config.RateLimit{RequestsPerSecond: 1}},
	}}})
	if st := f.l.allowSubmit(submitOf("acme", "doc-1", nil)); st != nil {
		t.Fatalf("first submit of doc-1: %v", st)
	}
	st := f.l.allowSubmit(submitOf("acme", " doc-1 ", nil))
	if st == nil {
		t.Fatal("doc-1 resubmitted at once was allowed")
	}
	if reason, delay := reasonAndDelay(t, st); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_KEY_RATE_LIMITED) || delay <= time.Second || delay > 2*time.Second {
		t.Fatalf("refusal %s after %v, want %s within 2s", reason, delay, server.Reason(luciusv1.ErrorReason_ERROR_REASON_KEY_RATE_LIMITED))
	}
	for _, other := range []*luciusv1.Command{submitOf("acme", "doc-2", nil), submitOf("globex", "doc-1", nil), submitOf("acme", "", nil)} {
		if st := f.l.allowSubmit(other); st != nil {
			t.Errorf("tenant %s doc %q refused: %v", other.GetTenantId(), other.GetDocId(), st)
		}
	}
	scene := map[string]any{"scene": map[string]any{"id": 7.0}}
	if st := f.l.allowSubmit(submitOf("acme", "doc-3", scene)); st != nil {
		t.Fatalf("first submit of the scene: %v", st)
	}
	if st := f.l.allowSubmit(submitOf("acme", "doc-4", scene)); st == nil {
		t.Fatal("the same payload.scene resubmitted at once was allowed")
	}
	f.now = f.now.Add(2 * time.Second)
	if st := f.l.allowSubmit(submitOf("acme", "doc-1", nil)); st != nil {
		t.Fatalf("doc-1 after its bucket refilled: %v", st)
	}
}

// A submit refused by one bucket takes no token from the others.
func TestARefusedSubmitTakesNoToken(t *testing.T) {
	t.Parallel()
	f := newRateFixture(0, map[string]config.Tenant{"acme": {RequestRate: &config.RateLimit{RequestsPerSecond: 0.001, Burst: 2},
		KeyRateLimits: []config.KeyRateLimit{{Field: "doc_id", Rate: config.RateLimit{RequestsPerSecond: 0.001}}}}})
	if st := f.l.allowSubmit(submitOf("acme", "doc-1", nil)); st != nil {
		t.Fatal(st)
	}
	for range 5 {
		if st := f.l.allowSubmit(submitOf("acme", "doc-1", nil)); st == nil {
			t.Fatal("doc-1 allowed twice")
		}
	}
	if st := f.l.allowSubmit(submitOf("acme", "doc-2", nil)); st != nil {
		t.Fatalf("the tenant's second token was spent by refused submits: %v", st)
	}
	st := f.l.allowSubmit(submitOf("acme", "doc-3", nil))
	if reason, _ := reasonAndDelay(t, st); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED) {
		t.Fatalf("third distinct document: %s, want %s", reason, server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED))
	}
}

func TestKeyBucketsAreBounded(t *testing.T) {
	t.Parallel()
	f := newRateFixture(3, map[string]config.Tenant{"acme": {KeyRateLimits: []config.KeyRateLimit{
		{Field: "doc_id", Rate: config.RateLimit{RequestsPerSecond: 0.001}}}}})
	for i := range 100 {
		if st := f.l.allowSubmit(submitOf("acme", fmt.Sprintf("doc-%d", i), nil)); st != nil {
			t.Fatalf("doc-%d: %v", i, st)
		}
	}
	if len(f.l.keys) != 3 || f.l.lru.Len() != 3 {
		t.Fatalf("%d key buckets (%d in the LRU), want 3", len(f.l.keys), f.l.lru.Len())
	}
	// The most recent keys are still limited; the evicted one starts full.
	if st := f.l.allowSubmit(submitOf("acme", "doc-99", nil)); st == nil {
		t.Error("a recent key was forgotten")
	}
	if st := f.l.allowSubmit(submitOf("acme", "doc-0", nil)); st != nil {
		t.Errorf("an evicted key did not start full: %v", st)
	}
}

// Over REST a submit over the tenant's rate is 429 with Retry-After and the
// reason, after a configuration change made through the ConfigService.
func TestSubmitOverTheTenantRateIs429WithRetryAfter(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	if code, body := f.rest(t, "PUT", "/v1/config/tenants/acme", map[string]any{
		"request_rate": map[string]any{"requests_per_second": 0.2, "burst": 1}}); code != http.StatusOK {
		t.Fatalf("set the rate: %d %v", code, body)
	}
	if code, body := f.rest(t, "POST", "/v1/commands", validBody("r1")); code != http.StatusAccepted {
		t.Fatalf("first submit: %d %v", code, body)
	}
	code, header, body := f.restHeader(t, "POST", "/v1/commands", validBody("r2"))
	if code != http.StatusTooManyRequests || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED) {
		t.Fatalf("second submit: %d %v, want 429 %s", code, body, server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED))
	}
	if ra := header.Get("Retry-After"); ra != "5" && ra != "4" {
		t.Errorf("Retry-After %q, want about 5 seconds", ra)
	}
}

// Every call a partner makes, but Submit (which charges the command's
// tenant itself), is charged to the tenants its token holds, all or
// nothing; operators are not charged.
func TestPartnerCallsAreChargedToTheirTenantsRates(t *testing.T) {
	t.Parallel()
	f := newRateFixture(0, map[string]config.Tenant{
		"acme":   {RequestRate: &config.RateLimit{RequestsPerSecond: 1, Burst: 1}},
		"globex": {RequestRate: &config.RateLimit{RequestsPerSecond: 1, Burst: 1}},
	})
	intercept := f.l.unary()
	calls := 0
	handler := func(context.Context, any) (any, error) { calls++; return "ok", nil }
	call := func(p *auth.Principal, method string) error {
		_, err := intercept(auth.NewContext(context.Background(), p), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		return err
	}
	acme := &auth.Principal{Subject: "acme-app", Roles: []auth.Role{auth.RolePartner}, Tenants: []string{"acme"}}
	both := &auth.Principal{Subject: "both-app", Roles: []auth.Role{auth.RolePartner}, Tenants: []string{"acme", "globex"}}
	ops := &auth.Principal{Subject: "ops", Roles: []auth.Role{auth.RoleOperator}}
	get := luciusv1.JobService_GetJob_FullMethodName

	if err := call(acme, get); err != nil {
		t.Fatalf("first call: %v", err)
	}
	err := call(acme, get)
	if reason, delay := reasonAndDelay(t, status.Convert(err)); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED) || delay <= 0 {
		t.Fatalf("second call within the second: %v", err)
	}
	// Refused for acme, so globex keeps both of its tokens.
	if err := call(both, luciusv1.JobService_ListJobs_FullMethodName); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a partner of acme and globex while acme is over its rate: %v", err)
	}
	if ok, _ := f.allow(t, "globex"); !ok {
		t.Fatal("globex lost a token to a refused call")
	}
	for _, c := range []struct {
		p      *auth.Principal
		method string
	}{{ops, get}, {acme, luciusv1.CommandService_Submit_FullMethodName}, {nil, "/grpc.health.v1.Health/Check"}} {
		if err := call(c.p, c.method); err != nil {
			t.Fatalf("%v calling %s: %v", c.p, c.method, err)
		}
	}
	if calls != 4 {
		t.Fatalf("the handler ran %d times, want 4 (no refused call reaches it)", calls)
	}
}
