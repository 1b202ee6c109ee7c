// Package busconfig selects and opens the message bus of a Lucius process,
// the one place a transport is chosen: every service and the worker read
// Config with ConfigFromEnv, apply Config.Migrations with their own, and call
// Open. No other package constructs a bus.
//
//	LUCIUS_BUS                           postgres (default) | servicebus
//	LUCIUS_BUS_POLL_INTERVAL             PostgreSQL bus: fallback poll when a notification is missed (default 2s)
//	LUCIUS_SERVICEBUS_CONNECTION_STRING  Service Bus: a connection string (SAS, or the emulator's)
//	LUCIUS_SERVICEBUS_NAMESPACE          Service Bus: fully qualified namespace, with Azure credentials
//	LUCIUS_SERVICEBUS_PROVISION          Service Bus: declare entities (default true)
//	LUCIUS_SERVICEBUS_ADMIN_ENDPOINT     Service Bus: a plain-HTTP management endpoint (emulator, test broker)
//
// The PostgreSQL bus (package pgbus) lives in the process's database. Azure
// Service Bus (package sbbus) needs no database for the bus; it is opened
// through Config.OpenServiceBus, which ConfigFromEnv sets to sbbus and tests
// may replace.
package busconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/bus/sbbus"
)

// Transport names a bus implementation (LUCIUS_BUS).
type Transport string

// Transports.
const (
	// Postgres is the PostgreSQL bus in the process's database: the default.
	Postgres Transport = "postgres"
	// ServiceBus is Azure Service Bus, the production transport.
	ServiceBus Transport = "servicebus"
)

// ErrNoServiceBus is returned (wrapped) for Transport ServiceBus when
// Config.OpenServiceBus is nil.
var ErrNoServiceBus = errors.New("LUCIUS_BUS=servicebus: this build has no Service Bus transport")

// Config says which bus a process opens. The zero value is the PostgreSQL
// bus with pgbus's defaults.
type Config struct {
	// Transport is Postgres (default, also for "") or ServiceBus.
	Transport Transport
	// Postgres tunes the PostgreSQL bus. Its Logger defaults to Open's.
	Postgres pgbus.Config
	// ServiceBus is handed to OpenServiceBus.
	ServiceBus ServiceBusConfig
	// OpenServiceBus opens the Azure Service Bus adapter: the hook a build
	// with the adapter sets (ConfigFromEnv sets it to the adapter this build
	// has, if any). nil: Transport ServiceBus fails with ErrNoServiceBus.
	OpenServiceBus ServiceBusFunc
}

// ServiceBusConfig is what the Azure Service Bus adapter needs to connect.
type ServiceBusConfig struct {
	// ConnectionString (LUCIUS_SERVICEBUS_CONNECTION_STRING) is a shared
	// access signature connection string, or the emulator's
	// (UseDevelopmentEmulator=true). Set it or Namespace, not both.
	ConnectionString string
	// Namespace (LUCIUS_SERVICEBUS_NAMESPACE) is the fully qualified
	// namespace, e.g. lucius.servicebus.windows.net, connected to with the
	// process's Azure credentials (workload or managed identity).
	Namespace string
	// Provision (LUCIUS_SERVICEBUS_PROVISION, default true) lets the bus
	// declare queues, topics and subscriptions (bus.Admin) through the
	// management API. false: they are provisioned outside Lucius, and the
	// adapter's Ensure* calls only check that they exist.
	Provision bool
	// AdminEndpoint (LUCIUS_SERVICEBUS_ADMIN_ENDPOINT) sends the management
	// API to a plain-HTTP endpoint instead of https://<namespace>/: the
	// emulator's or the test broker's.
	AdminEndpoint string
}

// ServiceBusFunc opens an Azure Service Bus adapter.
type ServiceBusFunc func(ctx context.Context, cfg ServiceBusConfig) (bus.Bus, error)

// openServiceBus opens the Service Bus adapter, package sbbus, with cfg: what
// ConfigFromEnv puts in Config.OpenServiceBus. Like the PostgreSQL bus, it
// reports its metrics and spans to the OpenTelemetry globals (sbbus.Config's
// defaults), which package telemetry sets up before a process opens its bus.
func openServiceBus(_ context.Context, cfg ServiceBusConfig) (bus.Bus, error) {
	return sbbus.New(sbbus.Config{ConnectionString: cfg.ConnectionString, Namespace: cfg.Namespace,
		SkipProvisioning: !cfg.Provision, AdminEndpoint: cfg.AdminEndpoint})
}

// ConfigFromEnv reads the bus settings (see the package comment). Problems
// are recorded in e; the error reports an invalid combination.
func ConfigFromEnv(e *env.Reader) (Config, error) {
	c := Config{
		Transport: Transport(e.String("LUCIUS_BUS", string(Postgres))),
		Postgres:  pgbus.Config{PollInterval: e.Duration("LUCIUS_BUS_POLL_INTERVAL", 0)},
		ServiceBus: ServiceBusConfig{
			ConnectionString: e.String("LUCIUS_SERVICEBUS_CONNECTION_STRING", ""),
			Namespace:        e.String("LUCIUS_SERVICEBUS_NAMESPACE", ""),
			Provision:        e.Bool("LUCIUS_SERVICEBUS_PROVISION", true),
			AdminEndpoint:    e.String("LUCIUS_SERVICEBUS_ADMIN_ENDPOINT", ""),
		},
		OpenServiceBus: openServiceBus,
	}
	return c, c.Validate()
}

func (c Config) transport() Transport {
	if c.Transport == "" {
		return Postgres
	}
	return c.Transport
}

// Validate reports an unknown transport, a transport's missing or invalid
// settings, and a Service Bus transport this build cannot open.
func (c Config) Validate() error {
	switch c.transport() {
	case Postgres:
		return c.Postgres.Validate()
	case ServiceBus:
		var errs []error
		if c.OpenServiceBus == nil {
			errs = append(errs, ErrNoServiceBus)
		}
		sb := c.ServiceBus
		switch {
		case sb.ConnectionString == "" && sb.Namespace == "":
			errs = append(errs, errors.New("LUCIUS_BUS=servicebus: set LUCIUS_SERVICEBUS_CONNECTION_STRING or LUCIUS_SERVICEBUS_NAMESPACE"))
		case sb.ConnectionString != "" && sb.Namespace != "":
			errs = append(errs, errors.New("LUCIUS_BUS=servicebus: set LUCIUS_SERVICEBUS_CONNECTION_STRING or LUCIUS_SERVICEBUS_NAMESPACE, not both"))
		}
		return errors.Join(errs...)
	default:
		return fmt.Errorf("LUCIUS_BUS=%q: want %s or %s", c.Transport, Postgres, ServiceBus)
	}
}

// Migrations are the migration sets the transport needs in the process's
// database, to apply with the process's own: the bus tables for PostgreSQL,
// none for Service Bus.
func (c Config) Migrations() []migrate.Set {
	if c.transport() == Postgres {
		return []migrate.Set{pgbus.Migrations}
	}
	return nil
}

// Open validates cfg and opens its bus. pool is the process's database,
// migrated with cfg.Migrations: required for the PostgreSQL bus (which keeps
// using it; the caller closes it after the bus), unused by Service Bus. log
// is the PostgreSQL bus's logger unless cfg.Postgres has one. Close the bus
// when done.
func Open(ctx context.Context, cfg Config, pool *pgxpool.Pool, log *slog.Logger) (bus.Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.transport() {
	case ServiceBus:
		b, err := cfg.OpenServiceBus(ctx, cfg.ServiceBus)
		if err != nil {
			return nil, fmt.Errorf("open service bus: %w", err)
		}
		return b, nil
	default:
		if pool == nil {
			return nil, errors.New("open postgres bus: no database pool")
		}
		pcfg := cfg.Postgres
		if pcfg.Logger == nil {
			pcfg.Logger = log
		}
		return pgbus.New(ctx, pool, pcfg)
	}
}
