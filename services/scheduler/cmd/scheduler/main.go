// Command scheduler runs Lucius's time service. Configuration comes from the
// environment; see README.md.
package main

import (
	"context"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/process"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
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
	}
	var err error
	cfg.Topology, err = topology.ConfigFromEnv(e)
	return cfg, err
}
