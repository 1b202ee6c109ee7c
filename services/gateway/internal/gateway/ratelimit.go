package gateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
)

// DefaultMaxKeyLimiters bounds the per-key token buckets a gateway keeps.
const DefaultMaxKeyLimiters = 50_000

// rateLimits enforces the request rates of the tenants' live configuration
// with token buckets: a tenant's request_rate on every call of the tenant,
// and its key_rate_limits on submits sharing an envelope field's value. The
// buckets are this gateway's own: N gateways admit up to N times a
// configured rate. A bucket follows its configuration: a changed rate
// applies at the next request, keeping the tokens the bucket holds. Per-key
// buckets are the least recently used maxKeys; one evicted was idle longer
// than every other, and starts full if its key comes back. Rates sit on top
// of the admission limits (jobs in flight), which the ledger enforces.
type rateLimits struct {
	config  func() *config.Snapshot
	now     func() time.Time
	maxKeys int

	mu      sync.Mutex
	tenants map[string]*bucket // by normalized tenant; only tenants with a rate
	keys    map[string]*list.Element
	lru     *list.List // of *keyBucket, most recently used first
}

type bucket struct {
	limit   config.RateLimit
	limiter *rate.Limiter
}

type keyBucket struct {
	key string
	bucket
}

func newRateLimits(cfg func() *config.Snapshot, maxKeys int) *rateLimits {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeyLimiters
	}
	return &rateLimits{config: cfg, now: time.Now, maxKeys: maxKeys, tenants: map[string]*bucket{},
		keys: map[string]*list.Element{}, lru: list.New()}
}

// allowTenants takes one token from each tenant's request_rate bucket, all
// or nothing, and returns nil or the RESOURCE_EXHAUSTED status to answer.
// Tenants without a configured rate are always allowed.
func (l *rateLimits) allowTenants(tenants []string) *status.Status {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	snap := l.config()
	var refused string
	var limit float64
	var wait time.Duration
	var taken []*rate.Reservation
	for _, t := range tenants {
		t = routing.Normalize(t)
		rl := snap.Tenants[t].RequestRate
		r := l.tenantReservation(rl, t, now)
		if r == nil {
			continue
		}
		taken = append(taken, r)
		if d := r.DelayFrom(now); d > wait {
			refused, limit, wait = t, rl.RequestsPerSecond, d
		}
	}
	if wait == 0 {
		return nil
	}
	for _, r := range taken {
		r.CancelAt(now)
	}
	return server.ResourceExhausted(luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED,
		fmt.Sprintf("tenant %q is over its request rate (%g/s); retry later", refused, limit), wait, "tenant_id", refused)
}

// unary charges every call of a partner, other than Submit (which charges
// the command's tenant and key rates itself), to the request rates of the
// tenants its token holds, before the handler does any work. Operators act
// for every tenant and are not charged; workers never reach the gateway's
// services. It runs after authentication, which put the principal in ctx.
func (l *rateLimits) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		p := auth.FromContext(ctx)
		if info.FullMethod == luciusv1.CommandService_Submit_FullMethodName || p == nil || p.Operator() {
			return handler(ctx, req)
		}
		if st := l.allowTenants(p.Tenants); st != nil {
			return nil, st.Err()
		}
		return handler(ctx, req)
	}
}

// allowSubmit applies the tenant's rate and every key rate to a submit, all
// or nothing: a refused submit takes no token from any bucket. It returns
// nil or the RESOURCE_EXHAUSTED status to answer.
func (l *rateLimits) allowSubmit(cmd *luciusv1.Command) *status.Status {
	tenant := routing.Normalize(cmd.GetTenantId())
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.config().Tenants[tenant]
	type taken struct {
		r      *rate.Reservation
		reason luciusv1.ErrorReason
		what   string
	}
	var all []taken
	if r := l.tenantReservation(t.RequestRate, tenant, now); r != nil {
		all = append(all, taken{r, luciusv1.ErrorReason_ERROR_REASON_TENANT_RATE_LIMITED, fmt.Sprintf("tenant %q is over its request rate (%g/s)", tenant, t.RequestRate.RequestsPerSecond)})
	}
	for _, k := range t.KeyRateLimits {
		value, ok := keyValue(cmd, k.Field)
		if !ok {
			continue
		}
		sum := sha256.Sum256([]byte(value)) // a key's memory does not grow with its value
		key := tenant + "\x00" + k.Field + "\x00" + string(sum[:])
		all = append(all, taken{l.keyReservation(key, k.Rate, now), luciusv1.ErrorReason_ERROR_REASON_KEY_RATE_LIMITED,
			fmt.Sprintf("tenant %q is over its rate for submits with the same %s (%g/s)", tenant, k.Field, k.Rate.RequestsPerSecond)})
	}
	var worst *taken
	var wait time.Duration
	for i := range all {
		if d := all[i].r.DelayFrom(now); d > wait {
			worst, wait = &all[i], d
		}
	}
	if worst == nil {
		return nil
	}
	for _, x := range all {
		x.r.CancelAt(now)
	}
	return server.ResourceExhausted(worst.reason, worst.what+"; retry later", wait, "tenant_id", tenant)
}

// tenantReservation reserves a token of the tenant's bucket (nil when the
// tenant has no rate: its bucket is dropped).
func (l *rateLimits) tenantReservation(limit *config.RateLimit, tenant string, now time.Time) *rate.Reservation {
	if limit == nil || limit.RequestsPerSecond <= 0 {
		delete(l.tenants, tenant)
		return nil
	}
	b, ok := l.tenants[tenant]
	if !ok {
		b = &bucket{}
		l.tenants[tenant] = b
	}
	b.follow(*limit, now)
	return b.limiter.ReserveN(now, 1)
}

// keyReservation reserves a token of a key's bucket, making it the most
// recently used and evicting the least recently used beyond maxKeys.
func (l *rateLimits) keyReservation(key string, limit config.RateLimit, now time.Time) *rate.Reservation {
	e, ok := l.keys[key]
	if ok {
		l.lru.MoveToFront(e)
	} else {
		e = l.lru.PushFront(&keyBucket{key: key})
		l.keys[key] = e
		for l.lru.Len() > l.maxKeys {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.keys, old.Value.(*keyBucket).key)
		}
	}
	kb := e.Value.(*keyBucket)
	kb.follow(limit, now)
	return kb.limiter.ReserveN(now, 1)
}

// follow makes the bucket apply limit, keeping its tokens when it changes.
func (b *bucket) follow(limit config.RateLimit, now time.Time) {
	burst := limit.Burst
	if burst <= 0 {
		burst = max(1, int(limit.RequestsPerSecond))
	}
	switch {
	case b.limiter == nil:
		b.limiter = rate.NewLimiter(rate.Limit(limit.RequestsPerSecond), burst)
	case b.limit != limit:
		b.limiter.SetLimitAt(now, rate.Limit(limit.RequestsPerSecond))
		b.limiter.SetBurstAt(now, burst)
	}
	b.limit = limit
}

// keyValue is the value of the envelope field a key rate names (doc_id,
// correlation_id, idempotency_key, request_type, or payload.<name> for a
// top-level payload value); false when the command has none.
func keyValue(cmd *luciusv1.Command, field string) (string, bool) {
	var v string
	switch field {
	case "doc_id":
		v = cmd.GetDocId()
	case "correlation_id":
		v = cmd.GetCorrelationId()
	case "idempotency_key":
		v = cmd.GetIdempotencyKey()
	case "request_type":
		v = cmd.GetRequestType()
	default:
		name, ok := strings.CutPrefix(field, "payload.")
		if !ok {
			return "", false
		}
		pv, ok := cmd.GetPayload().GetFields()[name]
		if !ok || pv.AsInterface() == nil {
			return "", false
		}
		b, err := pv.MarshalJSON()
		if err != nil {
			return "", false
		}
		v = string(b)
	}
	v = strings.TrimSpace(v)
	return v, v != ""
}
