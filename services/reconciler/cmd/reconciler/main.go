// Command reconciler runs Lucius's outbox dispatcher and drift-repair loops.
// Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
	"github.com/lucius-platform/lucius/services/reconciler/internal/reconciler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := env.New()
	tcfg := telemetry.Config{
		Service:      "reconciler",
		Instance:     e.String("LUCIUS_INSTANCE", "reconciler"),
		LogLevel:     e.String("LUCIUS_LOG_LEVEL", "info"),
		LogFormat:    e.String("LUCIUS_LOG_FORMAT", "json"),
		OTLPEndpoint: e.String("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	cfg := reconciler.Config{
		DatabaseURL: e.Required("DATABASE_URL"),
		GRPCAddr:    e.String("LUCIUS_RECONCILER_GRPC_ADDR", "127.0.0.1:9093"),
		HTTPAddr:    e.String("LUCIUS_RECONCILER_HTTP_ADDR", "127.0.0.1:8083"),
		Dispatcher: reconciler.DispatcherConfig{
			BatchSize:    e.Int("LUCIUS_OUTBOX_BATCH_SIZE", 0),
			Lease:        e.Duration("LUCIUS_OUTBOX_LEASE", 0),
			PollInterval: e.Duration("LUCIUS_OUTBOX_POLL_INTERVAL", 0),
		},
		OutboxRetention: e.Duration("LUCIUS_OUTBOX_RETENTION", 0),
		MaxDBConns:      int32(e.Int("LUCIUS_DB_MAX_CONNS", 20)),
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
	return reconciler.Run(ctx, cfg)
}
