package worker

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/loop"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Announcement is what a worker tells Lucius about itself
// (WorkerService.RegisterWorker): its service, this instance and the
// handlers it runs. Lucius adds the handlers to its catalog at once, so a
// workflow naming them registers and runs without restarting anything.
type Announcement struct {
	Service, InstanceID, Version string
	Handlers                     []*luciusv1.HandlerInfo
}

// Announce registers a at once and again at the heartbeat interval Lucius
// answers, until ctx ends. A failed announcement is retried with backoff
// (1 s doubling to the interval) and logged; the worker keeps serving the
// handlers Lucius already knows meanwhile.
func Announce(ctx context.Context, client luciusv1.WorkerServiceClient, a Announcement, log *slog.Logger) {
	const fallback = 30 * time.Second
	interval, backoff := fallback, time.Second
	announced := false
	failingSince := time.Time{}
	for {
		resp, err := client.RegisterWorker(ctx, &luciusv1.RegisterWorkerRequest{Service: a.Service, InstanceId: a.InstanceID,
			Version: a.Version, Handlers: a.Handlers})
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// A worker often starts before the gateway: only a failure that
			// lasts (or a refusal) is worth a warning.
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			level := slog.LevelInfo
			if status.Code(err) != codes.Unavailable || time.Since(failingSince) > interval {
				level = slog.LevelWarn
			}
			log.Log(ctx, level, "announce handlers: failed; retrying", "service", a.Service, "error", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, interval)
		default:
			if d := resp.GetHeartbeatInterval().AsDuration(); d > 0 {
				interval = d
			}
			if !announced {
				log.InfoContext(ctx, "handlers announced", "service", a.Service, "handlers", len(a.Handlers), "heartbeat", interval)
			}
			announced, backoff, wait, failingSince = true, time.Second, interval, time.Time{}
		}
		if !loop.Sleep(ctx, wait) {
			return
		}
	}
}
