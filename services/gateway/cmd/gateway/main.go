// Command gateway runs Lucius's ingress: the CommandService, JobService,
// WorkflowService, RunbookService and the other APIs over gRPC and REST.
// Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/services/gateway/internal/console"
	"github.com/lucius-platform/lucius/services/gateway/internal/gateway"
)

func main() {
	process.Main("gateway", configure, func(ctx context.Context, cfg gateway.Config, tel *telemetry.Telemetry) error {
		cfg.Logger, cfg.Ops = tel.Logger, tel.Ops
		return gateway.Run(ctx, cfg)
	})
}

func configure(e *env.Reader) (gateway.Config, error) {
	cfg := gateway.Config{
		Service: process.ReadService(e, "gateway", "127.0.0.1:9090", "127.0.0.1:8080", 20),
	}
	// These seed the stored configuration of a fresh database; afterwards the
	// ConfigService changes it.
	cfg.Policy.Seed.Refs.Schemes = e.List("LUCIUS_REF_SCHEMES", []string{"file", "https", "az"})
	mode, err := routing.ParseMode(e.String("LUCIUS_DEFAULT_MODE", "DEFAULT"))
	if err != nil {
		return cfg, err
	}
	topo, err := topology.ConfigFromEnv(e)
	if err != nil {
		return cfg, err
	}
	cfg.Policy.Seed.DefaultMode, cfg.Policy.Topology = mode, topo.Topology
	cfg.WorkflowsDir = e.String("LUCIUS_WORKFLOWS_DIR", "")
	cfg.Policy.Payload = gateway.PayloadLimits{
		MaxBytes: e.Int("LUCIUS_MAX_PAYLOAD_BYTES", gateway.DefaultMaxPayloadBytes),
		MaxDepth: e.Int("LUCIUS_MAX_PAYLOAD_DEPTH", gateway.DefaultMaxPayloadDepth),
	}
	cfg.WorkflowLimits = registry.LimitsFromEnv(e)
	cfg.Console = console.Config{URL: e.String("LUCIUS_CONSOLE_URL", ""),
		TicketTTL: e.Duration("LUCIUS_CONSOLE_TICKET_TTL", 60*time.Second), SessionTTL: e.Duration("LUCIUS_CONSOLE_SESSION_TTL", 8*time.Hour)}
	if issuer := e.String("LUCIUS_CONSOLE_OIDC_ISSUER", ""); issuer != "" {
		o := &console.OIDC{Issuer: issuer, ClientID: e.String("LUCIUS_CONSOLE_OIDC_CLIENT_ID", ""),
			Scopes: e.List("LUCIUS_CONSOLE_OIDC_SCOPES", []string{"openid"})}
		if path := e.String("LUCIUS_CONSOLE_OIDC_CLIENT_SECRET_FILE", ""); path != "" {
			secret, err := os.ReadFile(path)
			if err != nil {
				return cfg, fmt.Errorf("LUCIUS_CONSOLE_OIDC_CLIENT_SECRET_FILE: %w", err)
			}
			o.ClientSecret = strings.TrimSpace(string(secret))
		}
		cfg.Console.OIDC = o
	}
	cfg.Policy.MaxKeyLimiters = e.Int("LUCIUS_RATE_KEY_BUCKETS", gateway.DefaultMaxKeyLimiters)
	if cfg.Policy.FileRoots, err = config.ParseFileRoots(e.String("LUCIUS_FILE_ROOTS", "")); err != nil {
		return cfg, err
	}
	if cfg.Policy.Egress.Allow, err = egress.ParseAllow(e.String("LUCIUS_EGRESS_ALLOW", "")); err != nil {
		return cfg, err
	}
	return cfg, nil
}
