package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/loop"
	"github.com/lucius-platform/lucius/core/telemetry"
)

// OwnershipConfig holds the seed 000 timings.
type OwnershipConfig struct {
	HeartbeatInterval time.Duration // default 30s
	OrphanThreshold   time.Duration // default 2m
	OrphanScan        time.Duration // default 60s
	ReclaimBatch      int           // default 100
}

func (c *OwnershipConfig) defaults() {
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.OrphanThreshold == 0 {
		c.OrphanThreshold = 2 * time.Minute
	}
	if c.OrphanScan == 0 {
		c.OrphanScan = 60 * time.Second
	}
	if c.ReclaimBatch == 0 {
		c.ReclaimBatch = 100
	}
}

// heartbeatLoop keeps this instance's jobs owned. If it stops (a crash, a
// SIGSTOP), the jobs become orphans after OrphanThreshold.
func heartbeatLoop(ctx context.Context, store *ledger.Store, owner string, every time.Duration, log *slog.Logger) {
	loop.Every(ctx, every, true, func(ctx context.Context) {
		n, err := store.Heartbeat(ctx, owner)
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "heartbeat", telemetry.Err(err))
		case n > 0:
			log.DebugContext(ctx, "heartbeat", "jobs", n)
		}
	})
}

// orphanLoop reclaims jobs whose owner went silent. Reclaiming increments the
// owner epoch, fencing the former owner.
func orphanLoop(ctx context.Context, store *ledger.Store, owner string, cfg OwnershipConfig, log *slog.Logger) {
	loop.Every(ctx, cfg.OrphanScan, false, func(ctx context.Context) {
		reclaimed, err := store.ReclaimOrphans(ctx, owner, cfg.OrphanThreshold, cfg.ReclaimBatch)
		if err != nil {
			if ctx.Err() == nil {
				log.WarnContext(ctx, "orphan scan", telemetry.Err(err))
			}
			return
		}
		for _, r := range reclaimed {
			log.InfoContext(ctx, "reclaimed orphaned job", telemetry.JobID(r.JobID), "previous_owner", r.PreviousOwner,
				telemetry.KeyOwnerEpoch, r.Epoch)
		}
	})
}
