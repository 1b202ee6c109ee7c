// Command scheduler runs Lucius's time service. Configuration comes from the
// environment; see README.md.
package main

import (
	"context"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/services/scheduler/internal/scheduler"
)

func main() {
	process.Main("scheduler", configure, func(ctx context.Context, cfg scheduler.Config, tel *telemetry.Telemetry) error {
		cfg.Logger, cfg.Ops = tel.Logger, tel.Ops
		return scheduler.Run(ctx, cfg)
	})
}

func configure(e *env.Reader) (scheduler.Config, error) {
	cfg := scheduler.Config{
		Service: process.ReadService(e, "scheduler", "127.0.0.1:9094", "127.0.0.1:8084", 10),
		// Time between rounds (default 1s) and rows each stage handles per
		// runbook and round (default 500).
		Tick:  e.Duration("LUCIUS_SCHEDULER_TICK", 0),
		Batch: e.Int("LUCIUS_SCHEDULER_BATCH", 0),
	}
	var err error
	if cfg.Bus, err = busconfig.ConfigFromEnv(e); err != nil {
		return cfg, err
	}
	if cfg.Topology, err = topology.ConfigFromEnv(e); err != nil {
		return cfg, err
	}
	// Runbook time: real, or compressed for tests and demos (the executor in
	// the orchestrators reads the same settings).
	cfg.Now, err = process.Clock(e)
	return cfg, err
}
