package gateway

import (
	"context"
	"log/slog"

	"github.com/lucius-platform/lucius/core/apistatus"
)

// apiError maps the stores' errors to API statuses through apistatus, in
// the gateway's words: a missing row is NOT_FOUND as missing names it (with
// missing nil it is no caller's fault and falls through to UNAVAILABLE);
// anything unexplained is logged as what and answered "the <store> is
// unavailable; retry".
//
// Refusals that need the request to word them (a deleted asset, a job that
// cannot be replayed, nothing paused) stay beside their handler.
func apiError(ctx context.Context, log *slog.Logger, store, what string, err error, missing *apistatus.NotFound, attrs ...any) error {
	return apistatus.Error(ctx, log, err, apistatus.Call{NotFound: missing,
		Unavailable: "the " + store + " is unavailable; retry", Log: what, LogAttrs: attrs})
}

// ledgerError answers a ledger failure that is no caller's fault: a
// cancelled or timed-out request, or an unavailable ledger (logged).
func ledgerError(ctx context.Context, log *slog.Logger, what string, err error, attrs ...any) error {
	return apiError(ctx, log, "ledger", what, err, nil, attrs...)
}
