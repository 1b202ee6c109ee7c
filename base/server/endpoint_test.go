package server_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
)

// gRPC health follows readiness, as /readyz does, and turns NOT_SERVING as
// soon as the endpoint starts draining.
func TestGRPCHealthFollowsReadinessAndDraining(t *testing.T) {
	server.ReadinessInterval = 20 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	e, err := server.NewEndpoint(server.EndpointConfig{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: log,
		Guard: auth.NewGuard(nil, log)})
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	ready := func(context.Context) error {
		if failing.Load() {
			return errors.New("database unreachable")
		}
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx, 5*time.Second, nil, ready) }()
	conn, err := grpc.NewClient(e.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health never became %s (last %v, %v)", want, resp.GetStatus(), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	failing.Store(true)
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	failing.Store(false)
	waitFor(healthpb.HealthCheckResponse_SERVING)

	watchCtx, endWatch := context.WithCancel(context.Background())
	defer endWatch()
	watch, err := health.Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", first, err)
	}
	stop()
	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("draining: %v %v, want NOT_SERVING before the server stops", next, err)
	}
	endWatch() // as a client does on NOT_SERVING: the drain then ends at once
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
