// Command orchestrator runs one Lucius orchestrator instance. Run as many as
// you like: they compete for jobs and share the callback load. Configuration
// comes from the environment; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/google/uuid"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
	"github.com/lucius-platform/lucius/services/orchestrator/internal/orchestrator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := env.New()
	instance := e.String("LUCIUS_INSTANCE", "orchestrator")
	tcfg := telemetry.Config{
		Service:      "orchestrator",
		Instance:     instance,
		LogLevel:     e.String("LUCIUS_LOG_LEVEL", "info"),
		LogFormat:    e.String("LUCIUS_LOG_FORMAT", "json"),
		OTLPEndpoint: e.String("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	cfg := orchestrator.Config{
		DatabaseURL:        e.Required("DATABASE_URL"),
		GRPCAddr:           e.String("LUCIUS_ORCHESTRATOR_GRPC_ADDR", "127.0.0.1:9091"),
		HTTPAddr:           e.String("LUCIUS_ORCHESTRATOR_HTTP_ADDR", "127.0.0.1:8081"),
		OwnerID:            e.String("LUCIUS_OWNER_ID", instance+"-"+uuid.NewString()[:8]),
		WorkspaceRoot:      e.Required("LUCIUS_WORKSPACE_ROOT"),
		CallbackGRPCTarget: e.String("LUCIUS_CALLBACK_GRPC_TARGET", ""),
		CallbackRESTURL:    e.String("LUCIUS_CALLBACK_REST_URL", ""),
		JobConcurrency:     e.Int("LUCIUS_JOB_CONCURRENCY", 8),
		RetryBackoff:       e.Duration("LUCIUS_RETRY_BACKOFF", 0),
		MaxDBConns:         int32(e.Int("LUCIUS_DB_MAX_CONNS", 30)),
		BusPollInterval:    e.Duration("LUCIUS_BUS_POLL_INTERVAL", 0),
		Ownership: orchestrator.OwnershipConfig{
			HeartbeatInterval: e.Duration("LUCIUS_HEARTBEAT_INTERVAL", 0),
			OrphanThreshold:   e.Duration("LUCIUS_ORPHAN_THRESHOLD", 0),
			OrphanScan:        e.Duration("LUCIUS_ORPHAN_SCAN_INTERVAL", 0),
		},
	}
	topo, err := topology.ConfigFromEnv(e)
	if err != nil {
		return err
	}
	cfg.Topology = topo
	protocolsDir := e.String("LUCIUS_PROTOCOLS_DIR", "")
	if err := e.Err(); err != nil {
		return err
	}
	if cfg.Protocols, err = protocol.LoadDirOrBuiltin(protocolsDir); err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, tcfg)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background()) //nolint:errcheck
	cfg.Logger, cfg.Metrics = tel.Logger, tel.Metrics
	return orchestrator.Run(ctx, cfg)
}
