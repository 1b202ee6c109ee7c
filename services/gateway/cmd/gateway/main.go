// Command gateway runs Lucius's ingress: the CommandService and JobService over
// gRPC and REST. Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/routing"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/topology"
	"github.com/lucius-platform/lucius/services/gateway/internal/gateway"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := env.New()
	tcfg := telemetry.Config{
		Service:      "gateway",
		Instance:     e.String("LUCIUS_INSTANCE", "gateway"),
		LogLevel:     e.String("LUCIUS_LOG_LEVEL", "info"),
		LogFormat:    e.String("LUCIUS_LOG_FORMAT", "json"),
		OTLPEndpoint: e.String("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	cfg := gateway.Config{
		DatabaseURL: e.Required("DATABASE_URL"),
		GRPCAddr:    e.String("LUCIUS_GATEWAY_GRPC_ADDR", "127.0.0.1:9090"),
		HTTPAddr:    e.String("LUCIUS_GATEWAY_HTTP_ADDR", "127.0.0.1:8080"),
		MaxDBConns:  int32(e.Int("LUCIUS_DB_MAX_CONNS", 20)),
		Policy: gateway.Policy{
			RefSchemes: e.List("LUCIUS_REF_SCHEMES", []string{"file", "https", "az"}),
		},
	}
	mode, err := routing.ParseMode(e.String("LUCIUS_DEFAULT_MODE", "DEFAULT"))
	if err != nil {
		return err
	}
	topo, err := topology.ConfigFromEnv(e)
	if err != nil {
		return err
	}
	cfg.Policy.DefaultMode, cfg.Policy.Topology = mode, topo.Topology
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
	return gateway.Run(ctx, cfg)
}
