package reconciler

import (
	"context"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
)

// retentionSweeper deletes finished jobs older than their tenant's
// retention (live configuration: GlobalConfig.retention_days, overridden
// per tenant), a batch at a time, oldest first. Nothing is deleted while
// every retention is 0 (forever), the default.
func retentionSweeper(store *ledger.Store, live *config.Watcher, cfg SweepConfig, now func() time.Time) func(context.Context, *sweepMetrics) {
	return func(ctx context.Context, m *sweepMetrics) {
		loop.Every(ctx, cfg.Interval, true, func(ctx context.Context) {
			retentionRound(ctx, store, live.Current(), cfg, now(), m)
		})
	}
}

// retentionRound deletes, tenant by tenant, the finished jobs the
// configuration snap no longer keeps at now.
func retentionRound(ctx context.Context, store *ledger.Store, snap *config.Snapshot, cfg SweepConfig, now time.Time, m *sweepMetrics) {
	global, overrides := snap.Retention()
	if global == 0 && !anyPositive(overrides) {
		return
	}
	tenants, err := store.Tenants(ctx)
	if err != nil {
		m.failed(ctx, "retention", err)
		return
	}
	for _, tenant := range tenants {
		days, ok := overrides[tenant]
		if !ok {
			days = global
		}
		if days <= 0 {
			continue
		}
		cutoff := now.Add(-time.Duration(days) * 24 * time.Hour)
		n, err := loop.Drain(ctx, cfg.BatchSize, cfg.QueryTimeout, func(ctx context.Context, limit int) (int64, error) {
			return store.PurgeFinished(ctx, tenant, cutoff, limit)
		})
		if n > 0 {
			m.actionN(ctx, "retention", "PURGED", n)
			m.log.InfoContext(ctx, "sweeper retention: finished jobs deleted", telemetry.TenantID(tenant), "jobs", n,
				"retention_days", days, "ended_before", cutoff.UTC())
		}
		if err != nil {
			m.failed(ctx, "retention", err, telemetry.TenantID(tenant))
		}
	}
}

func anyPositive(days map[string]int) bool {
	for _, d := range days {
		if d > 0 {
			return true
		}
	}
	return false
}
