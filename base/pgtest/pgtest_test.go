package pgtest_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/pgtest"
)

var testMigrations = migrate.Set{Component: "pgtest", FS: fstest.MapFS{
	"0001_widgets.sql": {Data: []byte("-- +goose Up\nCREATE TABLE widgets (id int PRIMARY KEY);\n-- +goose Down\nDROP TABLE widgets;\n")},
}}

func TestMain(m *testing.M) { pgtest.Main(m, testMigrations) }

func TestNewPoolGivesEachTestItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.NewPool(t), pgtest.NewPool(t)
	if _, err := a.Exec(ctx, `INSERT INTO widgets VALUES (1)`); err != nil {
		t.Fatalf("insert into a: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM widgets`).Scan(&n); err != nil {
		t.Fatalf("count in b: %v", err)
	}
	if n != 0 {
		t.Fatalf("database b sees %d rows written to database a", n)
	}
	var applied int
	if err := a.QueryRow(ctx, `SELECT count(*) FROM goose_pgtest WHERE version_id > 0 AND is_applied`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != 1 {
		t.Fatalf("goose_pgtest records %d applied migrations, want 1", applied)
	}
}

func TestMigrationsAreIdempotentWhenAppliedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	more := migrate.Set{Component: "extra", FS: fstest.MapFS{
		"0001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
		"0002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\n-- +goose Down\nDROP TABLE b;\n")},
	}}
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- migrate.Apply(ctx, db, more) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent apply: %v", err)
		}
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT max(version_id) FROM goose_extra WHERE is_applied`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != 2 {
		t.Fatalf("extra at version %d, want 2", version)
	}
}
