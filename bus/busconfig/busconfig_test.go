package busconfig

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/sbtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgbus.Migrations) }

// fakeServiceBus stands in for the adapter: it records the configuration it
// was opened with.
type fakeServiceBus struct {
	bus.Bus
	cfg ServiceBusConfig
}

// TxPublisher: Service Bus cannot publish in a database transaction.
func (*fakeServiceBus) TxPublisher() bus.TxPublisher { return nil }

func openFake(_ context.Context, cfg ServiceBusConfig) (bus.Bus, error) {
	return &fakeServiceBus{cfg: cfg}, nil
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want Config
		err  string // a substring of the error; "" for none
	}{
		{
			name: "default is the PostgreSQL bus",
			env:  map[string]string{},
			want: Config{Transport: Postgres, ServiceBus: ServiceBusConfig{Provision: true}},
		},
		{
			name: "PostgreSQL with a poll interval",
			env:  map[string]string{"LUCIUS_BUS": "postgres", "LUCIUS_BUS_POLL_INTERVAL": "200ms"},
			want: Config{Transport: Postgres, Postgres: pgbus.Config{PollInterval: 200 * time.Millisecond},
				ServiceBus: ServiceBusConfig{Provision: true}},
		},
		{
			name: "negative poll interval",
			env:  map[string]string{"LUCIUS_BUS_POLL_INTERVAL": "-1s"},
			want: Config{Transport: Postgres, Postgres: pgbus.Config{PollInterval: -time.Second},
				ServiceBus: ServiceBusConfig{Provision: true}},
			err: "negative",
		},
		{
			name: "unknown transport",
			env:  map[string]string{"LUCIUS_BUS": "kafka"},
			want: Config{Transport: "kafka", ServiceBus: ServiceBusConfig{Provision: true}},
			err:  `LUCIUS_BUS="kafka": want postgres or servicebus`,
		},
		{
			name: "Service Bus settings are read",
			env: map[string]string{"LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE": "lucius.servicebus.windows.net",
				"LUCIUS_SERVICEBUS_PROVISION": "false"},
			want: Config{Transport: ServiceBus, ServiceBus: ServiceBusConfig{Namespace: "lucius.servicebus.windows.net"}},
		},
		{
			name: "Service Bus on an emulator",
			env: map[string]string{"LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_CONNECTION_STRING": "Endpoint=sb://localhost:5672;UseDevelopmentEmulator=true",
				"LUCIUS_SERVICEBUS_ADMIN_ENDPOINT": "http://localhost:5300"},
			want: Config{Transport: ServiceBus, ServiceBus: ServiceBusConfig{ConnectionString: "Endpoint=sb://localhost:5672;UseDevelopmentEmulator=true",
				Provision: true, AdminEndpoint: "http://localhost:5300"}},
		},
		{
			name: "Service Bus without a connection string or namespace",
			env:  map[string]string{"LUCIUS_BUS": "servicebus"},
			want: Config{Transport: ServiceBus, ServiceBus: ServiceBusConfig{Provision: true}},
			err:  "set LUCIUS_SERVICEBUS_CONNECTION_STRING or LUCIUS_SERVICEBUS_NAMESPACE",
		},
		{
			name: "Service Bus with both",
			env: map[string]string{"LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE": "ns",
				"LUCIUS_SERVICEBUS_CONNECTION_STRING": "Endpoint=sb://localhost;UseDevelopmentEmulator=true"},
			want: Config{Transport: ServiceBus, ServiceBus: ServiceBusConfig{Namespace: "ns",
				ConnectionString: "Endpoint=sb://localhost;UseDevelopmentEmulator=true", Provision: true}},
			err: "not both",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env.FromMap(tt.env)
			got, err := ConfigFromEnv(e)
			err = errors.Join(err, e.Err())
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if tt.err == "" && got.OpenServiceBus == nil {
				t.Fatal("ConfigFromEnv did not wire the Service Bus adapter")
			}
			got.OpenServiceBus = nil // a func: checked above, not comparable
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Only the PostgreSQL bus has tables in the process's database.
func TestMigrationsPerTransport(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		transport Transport
		want      int
	}{{"", 1}, {Postgres, 1}, {ServiceBus, 0}} {
		if got := len((Config{Transport: tt.transport}).Migrations()); got != tt.want {
			t.Errorf("%q: %d migration sets, want %d", tt.transport, got, tt.want)
		}
	}
}

// Open builds the PostgreSQL bus on the process's pool, and Service Bus
// through the adapter's hook with the settings read; without the hook,
// Service Bus is a configuration error, and it never needs the pool.
func TestOpenSelectsTheTransport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sb := ServiceBusConfig{ConnectionString: "Endpoint=sb://localhost;UseDevelopmentEmulator=true", Provision: true}
	for _, tt := range []struct {
		name   string
		cfg    Config
		pool   *pgxpool.Pool
		check  func(t *testing.T, b bus.Bus)
		errIs  error
		errHas string
	}{
		{
			name: "postgres",
			cfg:  Config{Transport: Postgres},
			pool: pool,
			check: func(t *testing.T, b bus.Bus) {
				tp := b.TxPublisher()
				if tp == nil || !tp.InDatabase(pool) {
					t.Fatalf("%T publishes in transactions of the pool: %v; want true", b, tp != nil)
				}
				if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{name: "zero config is postgres", cfg: Config{}, pool: pool,
			check: func(t *testing.T, b bus.Bus) {
				if _, ok := b.(*pgbus.Bus); !ok {
					t.Fatalf("opened %T, want *pgbus.Bus", b)
				}
			}},
		{name: "postgres without a pool", cfg: Config{}, errHas: "no database pool"},
		{
			name: "service bus through the hook, without a pool",
			cfg:  Config{Transport: ServiceBus, ServiceBus: sb, OpenServiceBus: openFake},
			check: func(t *testing.T, b bus.Bus) {
				f, ok := b.(*fakeServiceBus)
				if !ok || f.cfg != sb {
					t.Fatalf("opened %T %+v, want the hook's bus with %+v", b, f, sb)
				}
				if b.TxPublisher() != nil {
					t.Fatal("the Service Bus stand-in claims to publish in transactions")
				}
			},
		},
		{name: "service bus without the hook", cfg: Config{Transport: ServiceBus, ServiceBus: sb}, pool: pool, errIs: ErrNoServiceBus},
		{
			name: "service bus hook failing",
			cfg: Config{Transport: ServiceBus, ServiceBus: sb, OpenServiceBus: func(context.Context, ServiceBusConfig) (bus.Bus, error) {
				return nil, errors.New("no route to namespace")
			}},
			errHas: "open service bus: no route to namespace",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Open(ctx, tt.cfg, tt.pool, nil)
			switch {
			case tt.errIs != nil || tt.errHas != "":
				if err == nil || tt.errIs != nil && !errors.Is(err, tt.errIs) || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("open: %v, want %v %q", err, tt.errIs, tt.errHas)
				}
				return
			case err != nil:
				t.Fatalf("open: %v", err)
			}
			if pb, ok := b.(*pgbus.Bus); ok {
				t.Cleanup(func() { pb.Close(context.Background()) }) //nolint:errcheck
			}
			tt.check(t, b)
		})
	}
}

// LUCIUS_BUS=servicebus opens the real adapter (package sbbus): against the
// Service-Bus-compatible test broker it provisions, sends and receives, and
// it cannot publish in a database transaction.
func TestServiceBusFromTheEnvironmentReachesTheBroker(t *testing.T) {
	t.Parallel()
	broker := sbtest.Start(t)
	e := env.FromMap(map[string]string{"LUCIUS_BUS": "servicebus", "LUCIUS_SERVICEBUS_CONNECTION_STRING": broker.ConnectionString,
		"LUCIUS_SERVICEBUS_ADMIN_ENDPOINT": broker.AdminURL})
	cfg, err := ConfigFromEnv(e)
	if err = errors.Join(err, e.Err()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	b, err := Open(ctx, cfg, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background()) //nolint:errcheck
	if b.TxPublisher() != nil {
		t.Fatal("Service Bus claims to publish in database transactions")
	}
	if err := b.EnsureQueue(ctx, "wired", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "wired")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m1", Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("wired"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hello" {
		t.Fatalf("received %v, %v", msgs, err)
	}
	if err := r.Complete(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
}
