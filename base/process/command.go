package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/migrate"
)

// A service binary started with one argument runs that command instead of
// the service:
//
//	healthcheck  GET /healthz of the service on this machine (its
//	             LUCIUS_<NAME>_HTTP_ADDR); exit 0 when it answers 200. A
//	             container's HEALTHCHECK without a shell or curl.
//	migrate      (binaries that pass MigrationsFunc to MainWithMigrations)
//	             bring DATABASE_URL's schema up to date and exit: a
//	             Kubernetes Job runs it once per release.
const (
	CommandHealthcheck = "healthcheck"
	CommandMigrate     = "migrate"
)

// MigrationsFunc says which migration sets a service applies, from its
// environment (the bus's depend on LUCIUS_BUS).
type MigrationsFunc func(e *env.Reader) ([]migrate.Set, error)

// httpAddresser is what every service config has through process.Service.
type httpAddresser interface{ httpAddress() string }

func (s Service) httpAddress() string { return s.HTTPAddr }

// Healthcheck asks the process listening on addr (host:port; an unspecified
// host means this machine) for /healthz and returns nil on 200.
func Healthcheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("healthcheck: HTTP address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /healthz answered %s", resp.Status)
	}
	return nil
}

// healthcheck runs the healthcheck command: the address comes from the
// service's own configuration, so its defaults apply.
func healthcheck[C any](ctx context.Context, e *env.Reader, configure func(*env.Reader) (C, error)) error {
	cfg, _ := configure(e) // a setting the check does not need may be missing
	h, ok := any(cfg).(httpAddresser)
	if !ok || h.httpAddress() == "" {
		return errors.New("healthcheck: the service has no HTTP address")
	}
	return Healthcheck(ctx, h.httpAddress())
}

// Migrate brings the schema of the database at url up to date with sets,
// as every service does when it starts, and closes its connection.
func Migrate(ctx context.Context, url string, sets []migrate.Set) error {
	pool, err := database.Open(ctx, url, 2, sets...)
	if err != nil {
		return err
	}
	pool.Close()
	return nil
}

func runMigrate(ctx context.Context, service string, e *env.Reader, migrations MigrationsFunc) error {
	url := e.Required("DATABASE_URL")
	sets, err := migrations(e)
	if err = errors.Join(err, e.Err()); err != nil {
		return err
	}
	if err := Migrate(ctx, url, sets); err != nil {
		return err
	}
	for _, s := range sets {
		fmt.Fprintf(os.Stderr, "%s migrate: %s schema up to date\n", service, s.Component)
	}
	return nil
}
