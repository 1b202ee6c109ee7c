// Package requestid makes retries of mutating RPCs safe (AIP-155). Every
// request message with a string field named request_id takes part: a call
// with a non-empty id reserves (caller, method, id) in PostgreSQL with the
// SHA-256 of its request (deterministic proto encoding, request_id left
// out) before it runs. A retry with the same id and request answers what the
// first call answered, without running it again; with a different request
// it is refused (ALREADY_EXISTS, REQUEST_ID_REUSED). Two identical calls at
// once: the reservation row admits one, the other waits for its answer
// (ABORTED, REQUEST_ID_IN_PROGRESS if it takes longer than Config.Wait).
//
// Answers are remembered for Config.TTL: responses, and refusals that a
// retry would get again (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// FAILED_PRECONDITION, PERMISSION_DENIED, …). A transient failure
// (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, INTERNAL,
// UNKNOWN, CANCELLED) or a panic releases the id instead, so the retry runs: the
// handlers change state in one transaction, and a failed one changed
// nothing.
package requestid

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// FieldName is the request field this package reads (AIP-155).
const FieldName = "request_id"

// Config says how long ids are remembered and how duplicates wait. Zero
// values take the defaults noted.
type Config struct {
	// TTL: how long an id is remembered after its call started (24h).
	TTL time.Duration
	// StaleAfter: a reservation still running after this long belongs to a
	// call that never finished (its gateway died); a retry with the same
	// request takes it over (10m).
	StaleAfter time.Duration
	// Wait: how long a duplicate of a running call waits for its answer
	// before ABORTED REQUEST_ID_IN_PROGRESS (10s).
	Wait time.Duration
	// Poll: how often a waiting duplicate looks (50ms).
	Poll time.Duration
}

func (c *Config) defaults() {
	if c.TTL == 0 {
		c.TTL = 24 * time.Hour
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 10 * time.Minute
	}
	if c.Wait == 0 {
		c.Wait = 10 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = 50 * time.Millisecond
	}
}

// Validate reports settings that cannot work (zero values as their defaults).
func (c Config) Validate() error {
	if c.TTL < 0 || c.StaleAfter < 0 || c.Wait < 0 || c.Poll < 0 {
		return errors.New("requestid: durations must not be negative")
	}
	c.defaults()
	if c.StaleAfter >= c.TTL {
		return fmt.Errorf("requestid: StaleAfter (%s) must be shorter than TTL (%s)", c.StaleAfter, c.TTL)
	}
	return nil
}

// Interceptor serves request ids for one gRPC server.
type Interceptor struct {
	store *Store
	cfg   Config
	log   *slog.Logger
	calls metric.Int64Counter
}

// New returns an interceptor over store.
func New(store *Store, cfg Config, log *slog.Logger) (*Interceptor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	calls, err := otel.Meter("lucius/gateway").Int64Counter("lucius_gateway_request_ids_total",
		metric.WithDescription("Calls with a request_id, by method and outcome: executed (first call), replayed (a retry answered from the stored answer), refused (same id, different request), in_progress (a duplicate gave up waiting), released (a transient failure forgot the id)."))
	if err != nil {
		return nil, err
	}
	return &Interceptor{store: store, cfg: cfg, log: log, calls: calls}, nil
}

// Outcomes counted by lucius_gateway_request_ids_total.
const (
	outcomeExecuted   = "executed"
	outcomeReplayed   = "replayed"
	outcomeRefused    = "refused"
	outcomeInProgress = "in_progress"
	outcomeReleased   = "released"
)

// Unary is the interceptor; it must run after authentication (the caller
// scopes the id) and validation (request_id's format).
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		msg, ok := req.(proto.Message)
		if !ok {
			return handler(ctx, req)
		}
		id := RequestID(msg)
		if id == "" {
			return handler(ctx, req)
		}
		hash, err := canonicalHash(msg)
		if err != nil {
			return nil, server.Error(codes.Internal, luciusv1.ErrorReason_ERROR_REASON_INTERNAL, "hash request").Err()
		}
		k := Key{Scope: auth.FromContext(ctx).String(), Method: info.FullMethod, RequestID: id}
		deadline := time.Now().Add(i.cfg.Wait)
		for {
			res, err := i.store.Reserve(ctx, k, hash, i.cfg.TTL, i.cfg.StaleAfter)
			if err != nil {
				i.log.WarnContext(ctx, "reserve request id", "method", k.Method, "request_id", id, "err", err)
				return nil, server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "request ids are unavailable; retry").Err()
			}
			switch res.State {
			case Reserved:
				return i.run(ctx, k, res.Token, req, handler)
			case Mismatch:
				i.count(ctx, k.Method, outcomeRefused)
				return nil, server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED,
					"request_id "+id+" was used for a different request", "request_id", id).Err()
			case Done:
				i.count(ctx, k.Method, outcomeReplayed)
				i.log.InfoContext(ctx, "request id replayed", "method", k.Method, "request_id", id, "code", res.Code.String())
				return replay(info.FullMethod, res)
			}
			// Running: wait for the first call's answer.
			if time.Now().After(deadline) {
				i.count(ctx, k.Method, outcomeInProgress)
				return nil, server.Error(codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_IN_PROGRESS,
					"a call with request_id "+id+" is still running; retry later", "request_id", id).Err()
			}
			t := time.NewTimer(i.cfg.Poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-t.C:
			}
		}
	}
}

// release forgets the reservation of a call that changed nothing, so that
// its retry runs; sctx outlives the caller's ctx.
func (i *Interceptor) release(ctx, sctx context.Context, k Key, token string) {
	i.count(ctx, k.Method, outcomeReleased)
	if err := i.store.Release(sctx, k, token); err != nil {
		i.log.WarnContext(ctx, "release request id", "method", k.Method, "request_id", k.RequestID, "err", err)
	}
}

// run executes the call holding the reservation and stores its answer, or
// releases the id after a transient failure.
func (i *Interceptor) run(ctx context.Context, k Key, token string, req any, handler grpc.UnaryHandler) (resp any, herr error) {
	// The answer is stored even when the caller has gone: its retry wants it.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	defer func() {
		// A handler that panicked (answered INTERNAL by the recovery
		// interceptor outside) changed nothing it committed: forget the id.
		if p := recover(); p != nil {
			i.release(ctx, sctx, k, token)
			panic(p)
		}
	}()
	resp, herr = handler(ctx, req)
	st := status.Convert(herr)
	if herr != nil && !remembered(st.Code()) {
		i.release(ctx, sctx, k, token)
		return resp, herr
	}
	var answer []byte
	var err error
	if herr == nil {
		m, ok := resp.(proto.Message)
		if !ok {
			return resp, herr
		}
		answer, err = proto.Marshal(m)
	} else {
		answer, err = proto.Marshal(st.Proto())
	}
	if err == nil {
		err = i.store.Complete(sctx, k, token, st.Code(), answer)
	}
	if err != nil {
		// The call happened; its id stays reserved (a retry waits, then
		// takes it over after StaleAfter) rather than running it twice.
		i.log.WarnContext(ctx, "store request id answer", "method", k.Method, "request_id", k.RequestID, "err", err)
	}
	i.count(ctx, k.Method, outcomeExecuted)
	return resp, herr
}

func (i *Interceptor) count(ctx context.Context, method, outcome string) {
	i.calls.Add(ctx, 1, metric.WithAttributes(attribute.String("method", method), attribute.String("outcome", outcome)))
}

// remembered reports whether a failure is an answer a retry would get
// again, so it is stored like a response; the others release the id.
func remembered(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.Unauthenticated:
		return true
	}
	return false
}

// RequestID is msg's request_id, or "" when it has none.
func RequestID(msg proto.Message) string {
	m := msg.ProtoReflect()
	f := m.Descriptor().Fields().ByName(FieldName)
	if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
		return ""
	}
	return m.Get(f).String()
}

// canonicalHash is the SHA-256 of msg's deterministic encoding without its
// request_id: what "the same request" means.
func canonicalHash(msg proto.Message) ([]byte, error) {
	c := proto.Clone(msg)
	m := c.ProtoReflect()
	m.Clear(m.Descriptor().Fields().ByName(FieldName))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// replay rebuilds a stored answer: the method's response, or its status.
func replay(fullMethod string, res Reservation) (any, error) {
	if res.Code != codes.OK {
		sp := &spb.Status{}
		if err := proto.Unmarshal(res.Answer, sp); err != nil {
			return nil, status.Error(res.Code, "stored answer unreadable")
		}
		return nil, status.ErrorProto(sp)
	}
	out, err := newResponse(fullMethod)
	if err != nil {
		return nil, server.Error(codes.Internal, luciusv1.ErrorReason_ERROR_REASON_INTERNAL, err.Error()).Err()
	}
	if err := proto.Unmarshal(res.Answer, out); err != nil {
		return nil, server.Error(codes.Internal, luciusv1.ErrorReason_ERROR_REASON_INTERNAL, "stored answer unreadable").Err()
	}
	return out, nil
}

// newResponse returns an empty response of a method named
// "/package.Service/Method", from the contract's registered descriptors.
func newResponse(fullMethod string) (proto.Message, error) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("method name %q", fullMethod)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("method %s", fullMethod)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("response of %s: %w", fullMethod, err)
	}
	return mt.New().Interface(), nil
}
