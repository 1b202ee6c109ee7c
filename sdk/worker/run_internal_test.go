package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
)

// The database holds the PostgreSQL store's tables and, with the
// PostgreSQL bus, the bus's: with Service Bus (here a stand-in opened
// through the adapter's hook) the bus needs nothing of it, and with the
// local store too the worker opens no database at all.
func TestOpenBackendsOpensOnlyWhatTheSettingsSelect(t *testing.T) {
	t.Parallel()
	serviceBus := busconfig.Config{Transport: busconfig.ServiceBus,
		ServiceBus: busconfig.ServiceBusConfig{Namespace: "lucius.servicebus.windows.net"},
		OpenServiceBus: func(context.Context, busconfig.ServiceBusConfig) (bus.Bus, error) {
			return serviceBusStandIn{}, nil
		}}
	for _, tt := range []struct {
		name                    string
		bus                     busconfig.Config
		store                   string
		database                bool
		busTables, workerTables bool
	}{
		{"postgres bus and store", busconfig.Config{Transport: busconfig.Postgres}, StorePostgres, true, true, true},
		{"service bus, postgres store", serviceBus, StorePostgres, true, false, true},
		{"service bus, local store", serviceBus, StoreLocal, false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := settings{maxConns: 4, bus: tt.bus, store: tt.store, storePath: filepath.Join(t.TempDir(), "worker.db")}
			if tt.database {
				s.databaseURL = pgtest.NewEmptyDB(t)
			}
			b, store, ready, closeAll, err := openBackends(ctx, s, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll()
			if err := ready(ctx); err != nil {
				t.Fatal(err)
			}
			if _, standIn := b.(serviceBusStandIn); standIn == tt.busTables {
				t.Fatalf("opened %T", b)
			}
			if _, local := store.(*LocalStore); local != (tt.store == StoreLocal) {
				t.Fatalf("store %T, want %s", store, tt.store)
			}
			if !tt.database {
				return
			}
			pool, err := pgxpool.New(ctx, s.databaseURL)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var busTables, workerTables bool
			err = pool.QueryRow(ctx, `SELECT to_regclass('bus_messages') IS NOT NULL,
				EXISTS (SELECT FROM pg_tables WHERE tablename LIKE 'worker%')`).Scan(&busTables, &workerTables)
			if err != nil {
				t.Fatal(err)
			}
			if busTables != tt.busTables || workerTables != tt.workerTables {
				t.Errorf("bus tables %v, worker tables %v; want %v, %v", busTables, workerTables, tt.busTables, tt.workerTables)
			}
		})
	}
}

// serviceBusStandIn is a bus that is not in the database.
type serviceBusStandIn struct{ bus.Bus }

func (serviceBusStandIn) Close(context.Context) error { return nil }

func (serviceBusStandIn) TxPublisher() bus.TxPublisher { return nil }
