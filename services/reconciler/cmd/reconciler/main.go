// Command reconciler runs Lucius's outbox dispatcher and drift-repair loops.
// Configuration comes from the environment; see README.md.
package main

import (
	"context"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/process"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
	"github.com/lucius-platform/lucius/services/reconciler/internal/reconciler"
)

func main() {
	process.Main("reconciler", configure, func(ctx context.Context, cfg reconciler.Config, tel *telemetry.Telemetry) error {
		cfg.Logger, cfg.Ops = tel.Logger, tel.Ops
		return reconciler.Run(ctx, cfg)
	})
}

func configure(e *env.Reader) (reconciler.Config, error) {
	cfg := reconciler.Config{
		Service: process.ReadService(e, "reconciler", "127.0.0.1:9093", "127.0.0.1:8083", 20),
		Dispatcher: reconciler.DispatcherConfig{
			BatchSize:    e.Int("LUCIUS_OUTBOX_BATCH_SIZE", 0),
			Lease:        e.Duration("LUCIUS_OUTBOX_LEASE", 0),
			PollInterval: e.Duration("LUCIUS_OUTBOX_POLL_INTERVAL", 0),
		},
		OutboxRetention: e.Duration("LUCIUS_OUTBOX_RETENTION", 0),
	}
	cfg.Callbacks = reconciler.CallbackConfig{
		MaxAttempts:    e.Int("LUCIUS_CALLBACK_MAX_ATTEMPTS", 0),
		InitialBackoff: e.Duration("LUCIUS_CALLBACK_BACKOFF", 0),
		Timeout:        e.Duration("LUCIUS_CALLBACK_TIMEOUT", 0),
	}
	var err error
	cfg.Topology, err = topology.ConfigFromEnv(e)
	return cfg, err
}
