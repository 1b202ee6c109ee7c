// Command reconciler runs Lucius's outbox dispatcher and drift-repair loops.
// Configuration comes from the environment; see README.md.
package main

import (
	"context"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/breaker"
	"github.com/lucius-platform/lucius/core/registry"
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
		OutboxRetention:    e.Duration("LUCIUS_OUTBOX_RETENTION", 0),
		WorkspaceRoot:      e.Required("LUCIUS_WORKSPACE_ROOT"),
		CallbackKeys:       auth.ReadCallbackKeys(e),
		CallbackTokenGrace: e.Duration("LUCIUS_CALLBACK_TOKEN_GRACE", 0),
		CallbackGRPCTarget: e.String("LUCIUS_CALLBACK_GRPC_TARGET", ""),
		CallbackRESTURL:    e.String("LUCIUS_CALLBACK_REST_URL", ""),
		Sweepers: reconciler.SweepersConfig{
			Acks:        sweep(e, "ACK"),
			Leases:      sweep(e, "LEASE"),
			Dispatching: sweep(e, "DISPATCHING"),
			SLA:         sweep(e, "SLA"),
			Outbox:      sweep(e, "OUTBOX"),
			Requests:    sweep(e, "REQUESTS"),
			DeadLetters: sweep(e, "DEADLETTER"),
			Slots:       sweep(e, "SLOTS"),
			Polls:       sweep(e, "POLL"),
			Retention:   sweep(e, "RETENTION"),
		},
	}
	cfg.Callbacks = reconciler.CallbackConfig{
		MaxAttempts:    e.Int("LUCIUS_CALLBACK_MAX_ATTEMPTS", 0),
		InitialBackoff: e.Duration("LUCIUS_CALLBACK_BACKOFF", 0),
		Timeout:        e.Duration("LUCIUS_CALLBACK_TIMEOUT", 0),
	}
	cfg.WorkflowLimits = registry.LimitsFromEnv(e)
	cfg.Breakers = breaker.PolicyFromEnv(e)
	var err error
	if cfg.Egress.Allow, err = egress.ParseAllow(e.String("LUCIUS_EGRESS_ALLOW", "")); err != nil {
		return cfg, err
	}
	if cfg.Bus, err = busconfig.ConfigFromEnv(e); err != nil {
		return cfg, err
	}
	cfg.Topology, err = topology.ConfigFromEnv(e)
	return cfg, err
}

// sweep reads one sweeper's settings: LUCIUS_SWEEP_<NAME>_INTERVAL, _BATCH,
// _TIMEOUT and _AGE (zero: the sweeper's default).
func sweep(e *env.Reader, name string) reconciler.SweepConfig {
	prefix := "LUCIUS_SWEEP_" + name + "_"
	return reconciler.SweepConfig{
		Interval:     e.Duration(prefix+"INTERVAL", 0),
		BatchSize:    e.Int(prefix+"BATCH", 0),
		QueryTimeout: e.Duration(prefix+"TIMEOUT", 0),
		Age:          e.Duration(prefix+"AGE", 0),
	}
}
