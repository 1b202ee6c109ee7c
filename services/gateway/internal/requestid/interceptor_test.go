package requestid

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

var cancelInfo = &grpc.UnaryServerInfo{FullMethod: luciusv1.JobService_CancelJob_FullMethodName}

const jobID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeHandler answers CancelJob with a job whose reason counts the calls, or
// with the errors queued in errs first.
type fakeHandler struct {
	calls atomic.Int32
	mu    sync.Mutex
	errs  []error
	delay time.Duration
}

func (h *fakeHandler) handle(_ context.Context, req any) (any, error) {
	n := h.calls.Add(1)
	time.Sleep(h.delay)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) > 0 {
		err := h.errs[0]
		h.errs = h.errs[1:]
		return nil, err
	}
	r := req.(*luciusv1.CancelJobRequest)
	return &luciusv1.CancelJobResponse{Job: &luciusv1.Job{JobId: r.GetJobId(), Reason: r.GetReason() + string(rune('0'+n))}}, nil
}

func setupInterceptor(t *testing.T, cfg Config) (grpc.UnaryServerInterceptor, context.Context) {
	t.Helper()
	i, err := New(NewStore(pgtest.NewPool(t)), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := auth.NewContext(context.Background(), &auth.Principal{Issuer: "iss", Subject: "ops", Roles: []auth.Role{auth.RoleOperator}})
	return i.Unary(), ctx
}

func cancelReq(id, reason string) *luciusv1.CancelJobRequest {
	return &luciusv1.CancelJobRequest{JobId: jobID, Reason: reason, RequestId: id}
}

func TestInterceptorAnswersARetryWithoutRunningItAgain(t *testing.T) {
	t.Parallel()
	unary, ctx := setupInterceptor(t, Config{})
	h := &fakeHandler{}
	first, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle)
	if err != nil {
		t.Fatal(err)
	}
	again, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle)
	if err != nil {
		t.Fatal(err)
	}
	if h.calls.Load() != 1 || !proto.Equal(first.(proto.Message), again.(proto.Message)) {
		t.Fatalf("%d handler calls, answers %v and %v: want 1 call and the same answer", h.calls.Load(), first, again)
	}
	_, err = unary(ctx, cancelReq("r-1", "another reason"), cancelInfo, h.handle)
	if status.Code(err) != codes.AlreadyExists || server.ReasonOf(err) != luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED {
		t.Fatalf("same id, different request: %v, want ALREADY_EXISTS REQUEST_ID_REUSED", err)
	}
	if _, err := unary(ctx, cancelReq("", "x"), cancelInfo, h.handle); err != nil || h.calls.Load() != 2 {
		t.Fatalf("without an id: %v after %d calls, want the handler run", err, h.calls.Load())
	}
}

func TestInterceptorRemembersRefusalsAndForgetsTransientFailures(t *testing.T) {
	t.Parallel()
	notFound := server.Error(codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, "job not found").Err()
	tests := []struct {
		name      string
		err       error
		wantCalls int32
		wantCode  codes.Code
	}{
		{"a refusal is answered again", notFound, 1, codes.NotFound},
		{"an unavailable database releases the id", status.Error(codes.Unavailable, "db down"), 2, codes.OK},
		{"an internal error releases the id", status.Error(codes.Internal, "bug"), 2, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			unary, ctx := setupInterceptor(t, Config{})
			h := &fakeHandler{errs: []error{tt.err}}
			if _, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle); status.Code(err) != status.Code(tt.err) {
				t.Fatalf("first call: %v, want %v", err, tt.err)
			}
			_, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle)
			if status.Code(err) != tt.wantCode || h.calls.Load() != tt.wantCalls {
				t.Fatalf("retry: %v after %d calls, want %v after %d", err, h.calls.Load(), tt.wantCode, tt.wantCalls)
			}
			if tt.wantCode == codes.NotFound && server.ReasonOf(err) != luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND {
				t.Fatalf("replayed refusal lost its reason: %v", err)
			}
		})
	}
}

func TestInterceptorRunsOneOfConcurrentIdenticalCalls(t *testing.T) {
	t.Parallel()
	unary, ctx := setupInterceptor(t, Config{Poll: 10 * time.Millisecond})
	h := &fakeHandler{delay: 200 * time.Millisecond}
	const n = 5
	answers := make([]any, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			resp, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle)
			if err != nil {
				t.Error(err)
			}
			answers[k] = resp
		})
	}
	wg.Wait()
	if h.calls.Load() != 1 {
		t.Fatalf("%d handler calls, want 1", h.calls.Load())
	}
	for _, a := range answers[1:] {
		if !proto.Equal(a.(proto.Message), answers[0].(proto.Message)) {
			t.Fatalf("answers differ: %v and %v", a, answers[0])
		}
	}
}

func TestInterceptorRefusesADuplicateThatWaitsTooLong(t *testing.T) {
	t.Parallel()
	unary, ctx := setupInterceptor(t, Config{Wait: 50 * time.Millisecond, Poll: 10 * time.Millisecond})
	h := &fakeHandler{delay: 500 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	_, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle)
	<-done
	if status.Code(err) != codes.Aborted || server.ReasonOf(err) != luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_IN_PROGRESS {
		t.Fatalf("duplicate of a running call: %v, want ABORTED REQUEST_ID_IN_PROGRESS", err)
	}
}

func TestInterceptorForgetsTheIdOfACallThatPanicked(t *testing.T) {
	t.Parallel()
	unary, ctx := setupInterceptor(t, Config{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not reach the caller")
			}
		}()
		_, _ = unary(ctx, cancelReq("r-1", "x"), cancelInfo, func(context.Context, any) (any, error) { panic("boom") })
	}()
	h := &fakeHandler{}
	if _, err := unary(ctx, cancelReq("r-1", "x"), cancelInfo, h.handle); err != nil || h.calls.Load() != 1 {
		t.Fatalf("retry after a panic: %v after %d calls, want it run", err, h.calls.Load())
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"a shorter TTL with a shorter StaleAfter", Config{TTL: time.Hour, StaleAfter: time.Minute}, true},
		{"a TTL shorter than the default StaleAfter", Config{TTL: 5 * time.Minute}, false},
		{"a negative wait", Config{Wait: -time.Second}, false},
	} {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestCanonicalHashIgnoresTheRequestIDOnly(t *testing.T) {
	t.Parallel()
	a, _ := canonicalHash(cancelReq("one", "x"))
	b, _ := canonicalHash(cancelReq("two", "x"))
	c, _ := canonicalHash(cancelReq("one", "y"))
	if string(a) != string(b) || string(a) == string(c) {
		t.Fatal("the hash must ignore request_id and nothing else")
	}
}
