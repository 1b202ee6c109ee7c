package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// deadLetterService implements lucius.v1.DeadLetterService from the ledger:
// steps that failed for good (written by the engine) and bus dead letters
// (collected by the reconciler).
type deadLetterService struct {
	luciusv1.UnimplementedDeadLetterServiceServer
	store *ledger.Store
	log   *slog.Logger
}

var _ luciusv1.DeadLetterServiceServer = (*deadLetterService)(nil)

// ListDeadLetters pages newest first; the page token is the last id seen.
func (s *deadLetterService) ListDeadLetters(ctx context.Context, req *luciusv1.ListDeadLettersRequest) (*luciusv1.ListDeadLettersResponse, error) {
	size := pageSize(req, 50)
	filter := ledger.DeadLetterFilter{JobID: req.GetJobId(), Tenants: tenantScope(ctx), Limit: size + 1}
	switch req.GetKind() {
	case luciusv1.DeadLetterKind_DEAD_LETTER_KIND_STEP:
		filter.Kind = ledger.DeadLetterStep
	case luciusv1.DeadLetterKind_DEAD_LETTER_KIND_BUS:
		filter.Kind = ledger.DeadLetterBus
	}
	before, err := decodeIDToken(req.GetPageToken(), 1)
	if err != nil {
		return nil, err
	}
	filter.BeforeID = before
	list, err := s.store.ListDeadLetters(ctx, filter)
	if err != nil {
		return nil, s.error(ctx, err)
	}
	resp := &luciusv1.ListDeadLettersResponse{}
	list, resp.NextPageToken = cutPage(list, size, func(last ledger.DeadLetter) string { return encodeIDToken(last.ID) })
	for _, d := range list {
		resp.DeadLetters = append(resp.DeadLetters, deadLetterToProto(d))
	}
	return resp, nil
}

// GetDeadLetter returns one dead letter with its body.
func (s *deadLetterService) GetDeadLetter(ctx context.Context, req *luciusv1.GetDeadLetterRequest) (*luciusv1.GetDeadLetterResponse, error) {
	d, err := s.store.GetDeadLetter(ctx, req.GetDeadLetterId())
	if err == nil && !auth.FromContext(ctx).Operator() {
		// A partner sees dead letters of its tenants' jobs only; others are NOT_FOUND.
		if d.JobID == "" {
			err = ledger.ErrNotFound
		} else {
			_, err = visibleJob(ctx, s.store, d.JobID)
		}
	}
	if errors.Is(err, ledger.ErrNotFound) {
		id := strconv.FormatInt(req.GetDeadLetterId(), 10)
		return nil, server.Error(codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_DEAD_LETTER_NOT_FOUND, "dead letter "+id+" not found",
			"dead_letter_id", id).Err()
	}
	if err != nil {
		return nil, s.error(ctx, err)
	}
	return &luciusv1.GetDeadLetterResponse{DeadLetter: deadLetterToProto(*d)}, nil
}

func (s *deadLetterService) error(ctx context.Context, err error) error {
	return ledgerError(ctx, s.log, "dead letters", err)
}
