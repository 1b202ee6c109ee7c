// Command orchestrator runs one Lucius orchestrator instance. Run as many as
// you like: they compete for jobs and share the callback load. Configuration
// comes from the environment; see README.md.
//
//	orchestrator              run an instance
//	orchestrator migrate      bring DATABASE_URL's schema up to date (every
//	                          service's sets) and exit
//	orchestrator healthcheck  exit 0 when the local instance's /healthz answers
package main

import (
	"context"

	"github.com/google/uuid"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/breaker"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/services/orchestrator/internal/orchestrator"
)

func main() {
	process.MainWithMigrations("orchestrator", configure, func(ctx context.Context, cfg orchestrator.Config, tel *telemetry.Telemetry) error {
		cfg.Logger, cfg.Ops = tel.Logger, tel.Ops
		return orchestrator.Run(ctx, cfg)
	}, migrations)
}

// migrations are what `orchestrator migrate` applies: every schema the
// services use (deploy/helm/lucius runs it as a Job once per release).
func migrations(e *env.Reader) ([]migrate.Set, error) {
	b, err := busconfig.ConfigFromEnv(e)
	if err != nil {
		return nil, err
	}
	return orchestrator.Migrations(b), nil
}

func configure(e *env.Reader) (orchestrator.Config, error) {
	cfg := orchestrator.Config{
		Service:            process.ReadService(e, "orchestrator", "127.0.0.1:9091", "127.0.0.1:8081", 30),
		OwnerID:            e.String("LUCIUS_OWNER_ID", e.String("LUCIUS_INSTANCE", "orchestrator")+"-"+uuid.NewString()[:8]),
		WorkspaceRoot:      e.Required("LUCIUS_WORKSPACE_ROOT"),
		CallbackKeys:       auth.ReadCallbackKeys(e),
		CallbackTokenGrace: e.Duration("LUCIUS_CALLBACK_TOKEN_GRACE", 0),
		CallbackGRPCTarget: e.String("LUCIUS_CALLBACK_GRPC_TARGET", ""),
		CallbackRESTURL:    e.String("LUCIUS_CALLBACK_REST_URL", ""),
		JobConcurrency:     e.Int("LUCIUS_JOB_CONCURRENCY", 8),
		Ownership: orchestrator.OwnershipConfig{
			HeartbeatInterval: e.Duration("LUCIUS_HEARTBEAT_INTERVAL", 0),
			OrphanThreshold:   e.Duration("LUCIUS_ORPHAN_THRESHOLD", 0),
			OrphanScan:        e.Duration("LUCIUS_ORPHAN_SCAN_INTERVAL", 0),
		},
	}
	var err error
	if cfg.Bus, err = busconfig.ConfigFromEnv(e); err != nil {
		return cfg, err
	}
	if cfg.Topology, err = topology.ConfigFromEnv(e); err != nil {
		return cfg, err
	}
	if cfg.Now, err = process.Clock(e); err != nil { // runbook time (compressed in tests)
		return cfg, err
	}
	cfg.WorkflowsDir = e.String("LUCIUS_WORKFLOWS_DIR", "")
	cfg.WorkflowLimits = registry.LimitsFromEnv(e)
	cfg.Breakers = breaker.PolicyFromEnv(e)
	return cfg, nil
}
