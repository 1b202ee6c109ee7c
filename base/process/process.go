// Package process runs a Lucius service binary the same way for every
// service: SIGINT/SIGTERM stop it gracefully, settings come from the
// environment (every problem reported at once), and telemetry is set up from
// the shared variables before the service starts:
//
//	LUCIUS_INSTANCE              instance name (default: the service name)
//	LUCIUS_LOG_LEVEL             debug | info (default) | warn | error
//	LUCIUS_LOG_FORMAT            json (default) | text
//	OTEL_*                       the standard OpenTelemetry variables (telemetry.Setup)
//	LUCIUS_PPROF                 true serves /debug/pprof/
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/telemetry"
)

// Main reads the service's settings with configure, sets up telemetry and runs
// start until a signal arrives. It exits the process with status 1 on error.
// Started with the one argument "healthcheck", it runs that command instead
// (see CommandHealthcheck).
func Main[C any](service string, configure func(*env.Reader) (C, error), start func(context.Context, C, *telemetry.Telemetry) error) {
	MainWithMigrations(service, configure, start, nil)
}

// MainWithMigrations is Main for a binary that also has the "migrate"
// command: migrations names the sets it applies (see CommandMigrate).
func MainWithMigrations[C any](service string, configure func(*env.Reader) (C, error), start func(context.Context, C, *telemetry.Telemetry) error, migrations MigrationsFunc) {
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == CommandHealthcheck:
		err = healthcheck(context.Background(), env.New(), configure)
	case len(os.Args) == 2 && os.Args[1] == CommandMigrate && migrations != nil:
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runMigrate(ctx, service, env.New(), migrations)
		stop()
	case len(os.Args) > 1:
		err = fmt.Errorf("unknown command %q (commands: %s)", os.Args[1:], commands(migrations))
	default:
		err = run(service, configure, start)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", service, err)
		os.Exit(1)
	}
}

func commands(migrations MigrationsFunc) string {
	if migrations != nil {
		return CommandHealthcheck + ", " + CommandMigrate
	}
	return CommandHealthcheck
}

func run[C any](service string, configure func(*env.Reader) (C, error), start func(context.Context, C, *telemetry.Telemetry) error) error {
	e := env.New()
	tcfg := TelemetryConfig(e, service)
	cfg, err := configure(e)
	if err = errors.Join(err, e.Err()); err != nil {
		return err
	}
	return Run(context.Background(), tcfg, func(ctx context.Context, tel *telemetry.Telemetry) error {
		return start(ctx, cfg, tel)
	})
}

// Run is the lifecycle every Lucius binary shares, the services' (through
// Main) and the workers' (worker.Run): it sets up telemetry from tcfg, runs
// body until body returns, stopping it gracefully by ending its context on
// SIGINT or SIGTERM (or when ctx ends), and flushes telemetry at the end.
func Run(ctx context.Context, tcfg telemetry.Config, body func(context.Context, *telemetry.Telemetry) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Setup(ctx, tcfg)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background()) //nolint:errcheck // best effort at exit
	return body(ctx, tel)
}

// TelemetryConfig reads the shared telemetry variables.
func TelemetryConfig(e *env.Reader, service string) telemetry.Config {
	return telemetry.Config{
		Service:   service,
		Instance:  e.String("LUCIUS_INSTANCE", service),
		LogLevel:  e.String("LUCIUS_LOG_LEVEL", "info"),
		LogFormat: e.String("LUCIUS_LOG_FORMAT", "json"),
		Pprof:     e.Bool("LUCIUS_PPROF", false),
	}
}
