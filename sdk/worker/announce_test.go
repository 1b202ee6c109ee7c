package worker_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// announcements answers RegisterWorker: unavailable first, then with a
// short heartbeat interval, recording every call.
type announcements struct {
	luciusv1.UnimplementedWorkerServiceServer
	mu    sync.Mutex
	calls []*luciusv1.RegisterWorkerRequest
}

func (a *announcements) RegisterWorker(_ context.Context, req *luciusv1.RegisterWorkerRequest) (*luciusv1.RegisterWorkerResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, req)
	if len(a.calls) == 1 {
		return nil, status.Error(codes.Unavailable, "gateway starting")
	}
	return &luciusv1.RegisterWorkerResponse{HeartbeatInterval: durationpb.New(50 * time.Millisecond)}, nil
}

func (a *announcements) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// A worker announces its handlers, retries after a failure, then heartbeats
// at the interval the gateway answers, until it stops.
func TestAnnounceRetriesThenHeartbeats(t *testing.T) {
	t.Parallel()
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	fake := &announcements{}
	luciusv1.RegisterWorkerServiceServer(srv, fake)
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		worker.Announce(ctx, luciusv1.NewWorkerServiceClient(conn), worker.Announcement{Service: "reverser", InstanceID: "r-0",
			Version: "1.0.0", Handlers: []*luciusv1.HandlerInfo{{Name: "REVERSE", Version: "1"}}}, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for fake.count() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d announcements in 10 s, want a retry and heartbeats", fake.count())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for _, c := range fake.calls {
		if c.GetService() != "reverser" || c.GetInstanceId() != "r-0" || len(c.GetHandlers()) != 1 || c.GetHandlers()[0].GetName() != "REVERSE" {
			t.Fatalf("announcement %v", c)
		}
	}
}
