// Command lucius-up runs the whole suite in the foreground on the embedded
// default (what `make up` runs): a project-local PostgreSQL cluster (or
// DATABASE_URL), the PostgreSQL bus (or, with LUCIUS_BUS=servicebus, Azure
// Service Bus or the Service Bus test broker), gateway, reconciler, scheduler, two
// orchestrators and OCR/EMBEDDING/SIS workers. It prints the endpoints, restarts a
// process that crashes, and on Ctrl-C stops everything it started, cleanly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/tools/stack"
)

func main() {
	bin := flag.String("bin", ".build/bin", "directory holding the service binaries")
	data := flag.String("data", ".lucius", "directory for the PostgreSQL cluster and workspaces")
	pgPort := flag.Int("pg-port", 54329, "port of the project's PostgreSQL cluster")
	noop := flag.Bool("noop-workers", false, "workers succeed without doing work (benchmarks)")
	flag.Parse()
	if err := run(*bin, *data, *pgPort, *noop); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-up:", err)
		os.Exit(1)
	}
}

func run(bin, data string, pgPort int, noop bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// file:// refs must name files under the file roots: LUCIUS_FILE_ROOTS
	// when set, else <data>/files.
	roots, err := config.ParseFileRoots(os.Getenv("LUCIUS_FILE_ROOTS"))
	if err != nil {
		return err
	}
	cfg := stack.Config{BinDir: bin, DataDir: data, DatabaseURL: os.Getenv("DATABASE_URL"), Durable: true,
		PGPort: pgPort, Output: os.Stdout, Env: map[string]string{}, FileRoots: roots, Bus: os.Getenv("LUCIUS_BUS")}
	if noop {
		cfg.Env["LUCIUS_WORKER_NOOP"] = "true"
	}
	fmt.Println("starting Lucius…")
	s, err := stack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	e := s.Endpoints
	fmt.Printf(`
Lucius is running.

  gateway REST      http://%s   (POST /v1/commands, GET /v1/jobs/{job_id}, /healthz, /readyz, /metrics)
  gateway gRPC      %s   (lucius.v1.CommandService, lucius.v1.JobService; reflection on)
  web console       http://%s/ui/   (sign in: LUCIUS_TOKEN=$(.build/bin/lucius token --role operator) .build/bin/lucius ui)
  orchestrators     gRPC %s   REST %s
  reconciler        http://%s/metrics
  scheduler         http://%s/healthz
  workers           %s
  PostgreSQL        %s
  bus               %s
  workspace         %s
  local issuer      %s (every call needs a token from it)
  file roots        %s   (file:// refs must name files here; set LUCIUS_FILE_ROOTS to change)
  egress allowlist  %s   (LUCIUS_EGRESS_ALLOW)

  TOKEN=$(.build/bin/lucius token --tenant acme --role partner)    # or --role operator
  curl -H "Authorization: Bearer $TOKEN" http://%s/v1/jobs

Press Ctrl-C to stop everything.
`, e.GatewayHTTP, e.GatewayGRPC, e.GatewayHTTP, strings.Join(e.Orchestrator, ", "), strings.Join(e.OrchHTTP, ", "),
		e.Reconciler, e.Scheduler, workers(e.Workers), s.URL, s.BusDescription(), s.Workspace, filepath.Dir(s.Issuer().JWKSPath()),
		strings.Join(s.FileRoots, ":"), egressAllow(), e.GatewayHTTP)

	supervise(ctx, s)
	fmt.Println("\nstopping Lucius…")
	stopCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s.Stop(stopCtx)
	fmt.Println("stopped.")
	return nil
}

// supervise restarts a process that exits on its own until ctx ends.
func supervise(ctx context.Context, s *stack.Stack) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		for _, name := range s.Names() {
			p := s.Process(name)
			if p.Running() || p.Stopping() {
				continue
			}
			fmt.Printf("%-15s | restarting\n", name)
			if err := s.Restart(ctx, name); err != nil && ctx.Err() == nil {
				fmt.Printf("%-15s | restart failed: %v\n", name, err)
			}
		}
	}
}

// egressAllow describes LUCIUS_EGRESS_ALLOW, which every process inherits.
func egressAllow() string {
	if v := os.Getenv("LUCIUS_EGRESS_ALLOW"); v != "" {
		return v
	}
	return "none: webhooks reach public addresses only"
}

func workers(w map[string]string) string {
	var parts []string
	for name, addr := range w {
		parts = append(parts, name+" http://"+addr)
	}
	return strings.Join(parts, ", ")
}
