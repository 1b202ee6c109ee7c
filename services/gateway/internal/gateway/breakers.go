package gateway

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// circuitBreakerService implements lucius.v1.CircuitBreakerService from the
// ledger (package breaker decides the breakers in the reconciler).
type circuitBreakerService struct {
	luciusv1.UnimplementedCircuitBreakerServiceServer
	store *ledger.Store
	log   *slog.Logger
}

var _ luciusv1.CircuitBreakerServiceServer = (*circuitBreakerService)(nil)

// transitionsShown bounds the transitions GetCircuitBreaker returns.
const transitionsShown = 20

// ListCircuitBreakers pages by service name; the page token is the last one listed.
func (s *circuitBreakerService) ListCircuitBreakers(ctx context.Context, req *luciusv1.ListCircuitBreakersRequest) (*luciusv1.ListCircuitBreakersResponse, error) {
	size := pageSize(req, 100)
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, err := s.store.Breakers(ctx, after, size+1)
	if err != nil {
		return nil, ledgerError(ctx, s.log, "circuit breakers", err)
	}
	resp := &luciusv1.ListCircuitBreakersResponse{}
	list, resp.NextPageToken = cutPage(list, size, func(last ledger.Breaker) string { return encodeToken(last.Service) })
	for _, b := range list {
		resp.CircuitBreakers = append(resp.CircuitBreakers, breakerToProto(b))
	}
	return resp, nil
}

// GetCircuitBreaker answers any service: one whose breaker never opened is CLOSED.
func (s *circuitBreakerService) GetCircuitBreaker(ctx context.Context, req *luciusv1.GetCircuitBreakerRequest) (*luciusv1.GetCircuitBreakerResponse, error) {
	b, ts, err := s.store.Breaker(ctx, req.GetService(), transitionsShown)
	if err != nil {
		return nil, ledgerError(ctx, s.log, "circuit breaker", err, "service", req.GetService())
	}
	resp := &luciusv1.GetCircuitBreakerResponse{CircuitBreaker: breakerToProto(b)}
	for _, t := range ts {
		resp.Transitions = append(resp.Transitions, &luciusv1.CircuitTransition{FromState: circuitState(t.From),
			ToState: circuitState(t.To), Reason: t.Reason, FailureRate: t.FailureRate, Attempts: int32(t.Attempts),
			Principal: t.Principal, CreateTime: timestamppb.New(t.At)})
	}
	return resp, nil
}

// ResetCircuitBreaker closes a breaker; the reconciler releases what it held.
func (s *circuitBreakerService) ResetCircuitBreaker(ctx context.Context, req *luciusv1.ResetCircuitBreakerRequest) (*luciusv1.ResetCircuitBreakerResponse, error) {
	reason := req.GetReason()
	if reason == "" {
		reason = "reset by an operator"
	}
	was, err := s.store.ChangeBreaker(ctx, ledger.BreakerChange{Service: req.GetService(), To: ledger.BreakerClosed,
		Reason: reason, Principal: principalName(ctx)})
	if err != nil && !errors.Is(err, ledger.ErrBreakerMoved) {
		return nil, ledgerError(ctx, s.log, "reset circuit breaker", err, "service", req.GetService())
	}
	s.log.InfoContext(ctx, "circuit breaker reset", "service", req.GetService(), "was", was, "reason", reason,
		"principal", principalName(ctx))
	b, _, err := s.store.Breaker(ctx, req.GetService(), 0)
	if err != nil {
		return nil, ledgerError(ctx, s.log, "circuit breaker", err, "service", req.GetService())
	}
	return &luciusv1.ResetCircuitBreakerResponse{CircuitBreaker: breakerToProto(b)}, nil
}

func breakerToProto(b ledger.Breaker) *luciusv1.CircuitBreaker {
	out := &luciusv1.CircuitBreaker{Service: b.Service, State: circuitState(b.State), Reason: b.Reason,
		FailureRate: b.FailureRate, Attempts: int32(b.Attempts), HeldSteps: int32(b.Held), UpdatedBy: b.UpdatedBy}
	if !b.UpdatedAt.IsZero() {
		out.UpdateTime = timestamppb.New(b.UpdatedAt)
	}
	if b.State == ledger.BreakerOpen && !b.RetryAt.IsZero() {
		out.RetryTime = timestamppb.New(b.RetryAt)
	}
	return out
}

func circuitState(s ledger.BreakerState) luciusv1.CircuitState {
	return luciusv1.CircuitState(luciusv1.CircuitState_value["CIRCUIT_STATE_"+string(s)])
}
