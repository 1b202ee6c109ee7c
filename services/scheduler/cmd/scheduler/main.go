// Command scheduler runs Lucius's time service. Configuration comes from the
// environment; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
	"github.com/lucius-platform/lucius/services/scheduler/internal/scheduler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := env.New()
	tcfg := telemetry.Config{
		Service:      "scheduler",
		Instance:     e.String("LUCIUS_INSTANCE", "scheduler"),
		LogLevel:     e.String("LUCIUS_LOG_LEVEL", "info"),
		LogFormat:    e.String("LUCIUS_LOG_FORMAT", "json"),
		OTLPEndpoint: e.String("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	cfg := scheduler.Config{
		DatabaseURL: e.Required("DATABASE_URL"),
		GRPCAddr:    e.String("LUCIUS_SCHEDULER_GRPC_ADDR", "127.0.0.1:9094"),
		HTTPAddr:    e.String("LUCIUS_SCHEDULER_HTTP_ADDR", "127.0.0.1:8084"),
	}
	topo, err := topology.ConfigFromEnv(e)
	if err != nil {
		return err
	}
	cfg.Topology = topo
	if err := e.Err(); err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, tcfg)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background()) //nolint:errcheck
	cfg.Logger, cfg.Metrics = tel.Logger, tel.Metrics
	return scheduler.Run(ctx, cfg)
}
