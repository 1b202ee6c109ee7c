package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/retry"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Backoff spaces out retried callbacks: Initial, multiplied by Multiplier
// per retry up to Max, each delay then spread by ±Jitter (a fraction) so a
// fleet of workers does not retry in step. Zero values take the defaults.
type Backoff struct {
	Initial    time.Duration // default 200ms
	Max        time.Duration // default 15s
	Multiplier float64       // default 2
	Jitter     float64       // default 0.2; 0 < Jitter <= 1
}

// Backoff defaults.
const (
	DefaultBackoffInitial    = 200 * time.Millisecond
	DefaultBackoffMax        = 15 * time.Second
	DefaultBackoffMultiplier = 2.0
	DefaultBackoffJitter     = 0.2
)

func (b Backoff) withDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max == 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBackoffMultiplier
	}
	if b.Jitter == 0 {
		b.Jitter = DefaultBackoffJitter
	}
	return b
}

func (b Backoff) validate() error {
	var errs []error
	if b.Initial < 0 || b.Max < 0 {
		errs = append(errs, errors.New("backoff durations must not be negative"))
	}
	if b.Initial > 0 && b.Max > 0 && b.Initial > b.Max {
		errs = append(errs, fmt.Errorf("backoff initial %v exceeds max %v", b.Initial, b.Max))
	}
	if b.Multiplier != 0 && b.Multiplier < 1 {
		errs = append(errs, fmt.Errorf("backoff multiplier %v is below 1", b.Multiplier))
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		errs = append(errs, fmt.Errorf("backoff jitter %v is outside [0, 1]", b.Jitter))
	}
	return errors.Join(errs...)
}

// Delay is the wait before retry n (0 for the first retry), jitter included.
// It never exceeds Max.
func (b Backoff) Delay(n int) time.Duration {
	b = b.withDefaults()
	return retry.Delay(b.Initial, b.Max, b.Multiplier, b.Jitter, n)
}

// roundRobin spreads callbacks over every address a target resolves to and
// skips those that are down: several orchestrators serve any callback.
const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// callbackClients keeps one gRPC connection per callback target, created on
// first use and closed by close.
type callbackClients struct {
	opts []grpc.DialOption

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	clients map[string]luciusv1.CallbackServiceClient
}

func newCallbackClients(opts []grpc.DialOption) *callbackClients {
	return &callbackClients{
		opts: append([]grpc.DialOption{
			grpc.WithDefaultServiceConfig(roundRobin),
			grpc.WithResolvers(addressListResolver{scheme: "ipv4"}, addressListResolver{scheme: "ipv6"}),
		}, opts...),
		conns:   map[string]*grpc.ClientConn{},
		clients: map[string]luciusv1.CallbackServiceClient{},
	}
}

// client returns the cached client of target, dialling it the first time
// (server.Dial: insecure transport, OpenTelemetry client handler).
func (c *callbackClients) client(target string) (luciusv1.CallbackServiceClient, error) {
	target = strings.TrimSpace(target)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[target]; ok {
		return cl, nil
	}
	conn, err := server.Dial(target, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("dial callback target %q: %w", target, err)
	}
	cl := luciusv1.NewCallbackServiceClient(conn)
	c.conns[target], c.clients[target] = conn, cl
	return cl, nil
}

func (c *callbackClients) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for target, conn := range c.conns {
		if err := conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close callback connection %s: %w", target, err))
		}
	}
	clear(c.conns)
	clear(c.clients)
	return errors.Join(errs...)
}

// addressListResolver resolves gRPC's "ipv4:" and "ipv6:" targets, a fixed,
// comma-separated address list such as "ipv4:127.0.0.1:9091,127.0.0.1:9092"
// (gRPC's naming syntax, which grpc-go has no built-in resolver for).
type addressListResolver struct{ scheme string }

func (r addressListResolver) Scheme() string { return r.scheme }

func (r addressListResolver) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	list := target.URL.Opaque
	if list == "" {
		list = strings.TrimPrefix(target.URL.Path, "/")
	}
	var endpoints []resolver.Endpoint
	var addrs []resolver.Address
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%s target %q: address %q: %w", r.scheme, list, a, err)
		}
		ip := net.ParseIP(host)
		if ip == nil || port == "" || (r.scheme == "ipv4") != (ip.To4() != nil) {
			return nil, fmt.Errorf("%s target %q: %q is not an %s address with a port", r.scheme, list, a, r.scheme)
		}
		addr := resolver.Address{Addr: a}
		addrs = append(addrs, addr)
		endpoints = append(endpoints, resolver.Endpoint{Addresses: []resolver.Address{addr}})
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s target has no addresses", r.scheme)
	}
	if err := cc.UpdateState(resolver.State{Addresses: addrs, Endpoints: endpoints}); err != nil {
		return nil, fmt.Errorf("%s target %q: %w", r.scheme, list, err)
	}
	return nopResolver{}, nil
}

type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}

// callVerdict is what a finished callback exchange means for the message.
type callVerdict int

const (
	// verdictAnswered: the orchestrator answered with a CallbackOutcome.
	verdictAnswered callVerdict = iota + 1
	// verdictNotFound: the orchestrator does not know the job or step.
	verdictNotFound
	// verdictRejected: the orchestrator refuses the request as malformed;
	// repeating it cannot help.
	verdictRejected
)

// errGaveUp: retries stopped at their deadline without an answer.
var errGaveUp = errors.New("no answer before the retry deadline")

// callRetrying calls fn until it is answered, or fails with a status that
// retrying cannot change, or ctx ends, or the deadline (zero: none) passes.
// Each call gets callTimeout. It returns the verdict, or ctx's error or
// errGaveUp joined to the last call's error.
func callRetrying(ctx context.Context, b Backoff, callTimeout time.Duration, deadline time.Time,
	onRetry func(attempt int, err error, wait time.Duration), fn func(ctx context.Context) error) (callVerdict, error) {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := fn(cctx)
		cancel()
		if err == nil {
			return verdictAnswered, nil
		}
		if ctx.Err() != nil {
			return 0, errors.Join(ctx.Err(), err)
		}
		switch status.Code(err) {
		case codes.NotFound:
			return verdictNotFound, err
		case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.AlreadyExists:
			return verdictRejected, err
		}
		// A callback token Lucius refused (expired, or naming another
		// attempt) stays refused however often it is sent.
		if server.ReasonOf(err) == luciusv1.ErrorReason_ERROR_REASON_CALLBACK_TOKEN_INVALID {
			return verdictRejected, err
		}
		wait := b.Delay(attempt)
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return 0, errors.Join(errGaveUp, err)
		}
		if onRetry != nil {
			onRetry(attempt+1, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}

// stopOutcome reports whether a callback outcome says another attempt owns
// the step (or it is over), so this attempt must stop.
func stopOutcome(o luciusv1.CallbackOutcome) bool {
	switch o {
	case luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT,
		luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH,
		luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL:
		return true
	}
	return false
}
