package bootstrap

import (
	"context"
	"embed"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/config"
)

//go:embed testdata/migrations/*.sql
var ownMigrations embed.FS

// The databases start empty: Open is what migrates them.
func TestMain(m *testing.M) { pgtest.Main(m) }

func service(t *testing.T) process.Service {
	t.Helper()
	return process.Service{DatabaseURL: pgtest.NewEmptyDB(t), MaxDBConns: 4}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestOpenMigratesTheControlPlaneAndTheBusAndDeclaresTheTopology(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt, err := Open(ctx, service(t), Options{Bus: &busconfig.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, table := range []string{"jobs", "config_head", "runbooks", "bus_messages"} {
		if !tableExists(t, rt.Pool, table) {
			t.Errorf("table %s missing after Open", table)
		}
	}
	if rt.Live.Current() == nil {
		t.Error("the live configuration was not loaded")
	}
	if err := rt.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if err := rt.Declare(ctx, topology.Config{}); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	// The declared queue takes messages: the bus is the one Options.Bus selected.
	s, err := rt.Bus.NewSender(ctx, topology.QueueOrchestratorJobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m1", Body: []byte("{}")}); err != nil {
		t.Fatalf("send to the declared queue: %v", err)
	}
	r, err := rt.Bus.NewReceiver(ctx, bus.QueueSource(topology.QueueOrchestratorJobs))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msgs, err := r.Receive(rctx, 1)
	if err != nil || len(msgs) != 1 || msgs[0].ID != "m1" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
}

func TestOpenWithoutABusMigratesTheServiceSetsAndSeedsTheGlobalConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := migrate.Embedded("bootstrap_test", ownMigrations, "testdata/migrations")
	seed := config.Global{RetentionDays: 7}
	rt, err := Open(ctx, service(t), Options{Migrations: []migrate.Set{own}, SeedGlobal: &seed})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.Bus != nil {
		t.Error("a bus was opened without Options.Bus")
	}
	if tableExists(t, rt.Pool, "bus_messages") {
		t.Error("the PostgreSQL bus's tables were migrated without Options.Bus")
	}
	if !tableExists(t, rt.Pool, "bootstrap_test_rows") {
		t.Error("the service's own set was not migrated")
	}
	if got := rt.Live.Current().Global.RetentionDays; got != 7 {
		t.Errorf("live global retention %d, want the seeded 7", got)
	}
	if err := rt.Declare(ctx, topology.Config{}); err == nil {
		t.Error("Declare without a bus succeeded")
	}
}

func TestOpenFailsOnAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := Open(ctx, process.Service{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, Options{Bus: &busconfig.Config{}})
	if err == nil {
		t.Fatal("Open succeeded without a database")
	}
}

func TestOpenThatFailsHalfwayClosesWhatItOpened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := service(t)
	_, err := Open(ctx, svc, Options{Bus: &busconfig.Config{Transport: "carrier-pigeon"}})
	if err == nil {
		t.Fatal("Open succeeded with an unknown bus")
	}
	cfg, err := pgxpool.ParseConfig(svc.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// A backend leaves pg_stat_activity a moment after its client hangs up.
	var conns int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, cfg.ConnConfig.Database).Scan(&conns); err != nil {
			t.Fatal(err)
		}
		if conns == 0 || time.Now().After(deadline) {
			break
		}
	}
	if conns != 0 {
		t.Errorf("%d connections to the database remain 5s after a failed Open", conns)
	}
}

func TestCloseReleasesEverythingInReverseOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt, err := Open(ctx, service(t), Options{Bus: &busconfig.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	b := rt.Bus
	rt.Close()
	if err := rt.Ready(ctx); err == nil {
		t.Error("the pool still answers after Close")
	}
	if _, err := b.NewSender(ctx, topology.QueueOrchestratorJobs); err == nil {
		t.Error("the bus still opens senders after Close")
	}
	rt.Close() // a second Close is harmless
}
