package worker

import (
	"github.com/lucius-platform/lucius/base/server"

	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func TestBackoffDelayGrowsAndIsCapped(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2}
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		want *= time.Millisecond
		for range 50 {
			d := b.Delay(n)
			lo := time.Duration(float64(want) * 0.8)
			if d < lo || d > want*12/10 || d > b.Max {
				t.Fatalf("Delay(%d) = %v, want %v ±20%% and at most %v", n, d, want, b.Max)
			}
		}
	}
	if d := (Backoff{}).Delay(1000); d > DefaultBackoffMax {
		t.Errorf("default backoff after many retries = %v, above the cap", d)
	}
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b       Backoff
		wantErr bool
	}{
		{Backoff{}, false},
		{Backoff{Initial: time.Second, Max: time.Millisecond}, true},
		{Backoff{Multiplier: 0.5}, true},
		{Backoff{Jitter: 1.5}, true},
		{Backoff{Initial: -1}, true},
	} {
		if err := tc.b.validate(); (err != nil) != tc.wantErr {
			t.Errorf("%+v: validate = %v", tc.b, err)
		}
	}
}

func TestCallRetryingVerdicts(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		errs      []error
		deadline  time.Duration
		want      callVerdict
		wantErr   error
		wantCalls int
	}{
		{"answered at once", nil, 0, verdictAnswered, nil, 1},
		{"retries unavailable", []error{status.Error(codes.Unavailable, ""), status.Error(codes.Internal, "")}, 0, verdictAnswered, nil, 3},
		{"not found stops", []error{status.Error(codes.NotFound, "")}, 0, verdictNotFound, nil, 1},
		{"invalid argument stops", []error{status.Error(codes.InvalidArgument, "")}, 0, verdictRejected, nil, 1},
		{"refused callback token stops", []error{server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_CALLBACK_TOKEN_INVALID, "").Err()}, 0, verdictRejected, nil, 1},
		{"other permission denials retry", []error{status.Error(codes.PermissionDenied, "")}, 0, verdictAnswered, nil, 2},
		{"gives up at deadline", []error{status.Error(codes.Unavailable, ""), status.Error(codes.Unavailable, ""),
			status.Error(codes.Unavailable, ""), status.Error(codes.Unavailable, ""), status.Error(codes.Unavailable, "")}, 3 * time.Millisecond, 0, errGaveUp, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			var deadline time.Time
			if tc.deadline > 0 {
				deadline = time.Now().Add(tc.deadline)
			}
			v, err := callRetrying(context.Background(), b, time.Second, deadline, nil, func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if v != tc.want || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || (tc.wantCalls > 0 && calls != tc.wantCalls) {
				t.Errorf("verdict %v, err %v, calls %d", v, err, calls)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := callRetrying(ctx, b, time.Second, time.Time{}, nil, func(context.Context) error { return status.Error(codes.Unavailable, "") }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled retry = %v", err)
	}
}

// TestAddressListResolverSpreadsCalls dials an "ipv4:" list with two
// servers: round robin must reach both.
func TestAddressListResolverSpreadsCalls(t *testing.T) {
	t.Parallel()
	var hits [2]atomic.Int32
	var addrs []string
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		luciusv1.RegisterCallbackServiceServer(s, countingServer{hit: func() { hits[i].Add(1) }})
		go s.Serve(ln) //nolint:errcheck
		t.Cleanup(s.Stop)
		addrs = append(addrs, ln.Addr().String())
	}
	clients := newCallbackClients(nil)
	t.Cleanup(func() { clients.close() })
	cl, err := clients.client("ipv4:" + addrs[0] + "," + addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	again, _ := clients.client("ipv4:" + addrs[0] + "," + addrs[1])
	if again != cl {
		t.Error("the client of a target is not cached")
	}
	// Calls go to whichever connection is ready; once both are, round robin
	// alternates between them.
	deadline := time.Now().Add(10 * time.Second)
	for (hits[0].Load() == 0 || hits[1].Load() == 0) && time.Now().Before(deadline) {
		if _, err := cl.Ack(context.Background(), &luciusv1.AckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if hits[0].Load() == 0 || hits[1].Load() == 0 {
		t.Errorf("calls per server = %d and %d, want both used", hits[0].Load(), hits[1].Load())
	}
}

func TestAddressListResolverRejectsBadLists(t *testing.T) {
	t.Parallel()
	clients := newCallbackClients(nil)
	t.Cleanup(func() { clients.close() })
	for _, target := range []string{"ipv4:", "ipv4:localhost:1", "ipv4:127.0.0.1", "ipv6:127.0.0.1:1", "ipv4:[::1]:1"} {
		cl, err := clients.client(target)
		if err != nil {
			continue // rejected when dialling
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = cl.Ack(ctx, &luciusv1.AckRequest{})
		cancel()
		if err == nil {
			t.Errorf("target %q reached a server", target)
		}
	}
}

type countingServer struct {
	luciusv1.UnimplementedCallbackServiceServer
	hit func()
}

func (s countingServer) Ack(context.Context, *luciusv1.AckRequest) (*luciusv1.AckResponse, error) {
	s.hit()
	return &luciusv1.AckResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED}, nil
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"minimal", Config{Service: "ocr"}, false},
		{"no service", Config{}, true},
		{"uppercase service", Config{Service: "OCR"}, true},
		{"service with slash", Config{Service: "ocr/x"}, true},
		{"unknown topology", Config{Service: "ocr", Topology: "three"}, true},
		{"negative concurrency", Config{Service: "ocr", Concurrency: -1}, true},
		{"negative timeout", Config{Service: "ocr", TaskTimeout: -time.Second}, true},
		{"tiny lock", Config{Service: "ocr", LockDuration: time.Millisecond}, true},
		{"long worker id", Config{Service: "ocr", WorkerID: string(make([]byte, 129))}, true},
		{"bad backoff", Config{Service: "ocr", Backoff: Backoff{Jitter: 2}}, true},
	} {
		if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
	d := Config{Service: "ocr"}.withDefaults()
	if d.Concurrency != DefaultConcurrency || d.WorkerID == "" || d.TaskTimeout != DefaultTaskTimeout || d.Topology == "" {
		t.Errorf("defaults = %+v", d)
	}
}

func TestHeartbeatInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lease, want time.Duration
	}{
		{0, 0}, // no lease_timeout: no heartbeats
		{-time.Second, 0},
		{time.Millisecond, MinHeartbeatInterval},
		{2 * time.Second, MinHeartbeatInterval},
		{3 * time.Second, time.Second},
		{30 * time.Second, 10 * time.Second},
		{10 * time.Minute, 200 * time.Second},
		{15 * time.Minute, MaxHeartbeatInterval},
		{24 * time.Hour, MaxHeartbeatInterval},
	} {
		if got := HeartbeatInterval(tc.lease); got != tc.want {
			t.Errorf("HeartbeatInterval(%v) = %v, want %v", tc.lease, got, tc.want)
		}
	}
}
