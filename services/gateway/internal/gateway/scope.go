package gateway

import (
	"context"
	"fmt"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/core/ledger"
)

// visibleJob loads a job the caller may see. Another tenant's job is
// ledger.ErrNotFound, exactly as a missing one: a partner cannot learn that
// it exists.
func visibleJob(ctx context.Context, store *ledger.Store, jobID string) (*ledger.Job, error) {
	job, err := store.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if !auth.FromContext(ctx).CanActFor(job.TenantID) {
		return nil, fmt.Errorf("job %s: %w", jobID, ledger.ErrNotFound)
	}
	return job, nil
}

// tenantScope is what a listing may show the caller: nil (every tenant) for
// an operator, else the tenants its token holds (possibly none).
func tenantScope(ctx context.Context) []string {
	p := auth.FromContext(ctx)
	if p.Operator() {
		return nil
	}
	if p == nil || !p.Has(auth.RolePartner) {
		return []string{}
	}
	return append([]string{}, p.Tenants...)
}

// principalName names the caller in audit events and logs.
func principalName(ctx context.Context) string { return auth.FromContext(ctx).String() }
