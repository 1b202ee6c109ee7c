package reconciler

import (
	"context"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// resumeInterval is how often held steps are checked against the pauses in
// force (and at once when the configuration changes).
const resumeInterval = time.Second

// resumer dispatches the steps an operator's pause held once no pause holds
// their job any more.
type resumer struct {
	store *ledger.Store
	eng   *engine.Engine
	live  *config.Watcher
	log   *slog.Logger
	wake  chan struct{}
}

func newResumer(store *ledger.Store, eng *engine.Engine, live *config.Watcher, log *slog.Logger) *resumer {
	r := &resumer{store: store, eng: eng, live: live, log: log, wake: make(chan struct{}, 1)}
	live.OnChange(func(*config.Snapshot) {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	})
	return r
}

func (r *resumer) run(ctx context.Context) {
	t := time.NewTicker(resumeInterval)
	defer t.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}

// round releases, in batches, the held steps whose jobs no pause holds.
func (r *resumer) round(ctx context.Context) {
	_, err := loop.Drain(ctx, 500, 30*time.Second, func(ctx context.Context, limit int) (int64, error) {
		var set ledger.PauseSet
		set.Global, set.Tenants, set.Lanes, set.Workflows = r.live.Current().PauseSet()
		freed, err := r.store.FreedHolds(ctx, set, limit)
		if err != nil {
			return 0, err
		}
		for i, h := range freed {
			if _, err := r.eng.ReleaseHold(ctx, h); err != nil {
				return int64(i), err
			}
		}
		if len(freed) > 0 {
			r.log.InfoContext(ctx, "paused steps resumed", "steps", len(freed))
		}
		return int64(len(freed)), nil
	})
	if err != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, "resume paused steps", telemetry.Err(err))
	}
}
