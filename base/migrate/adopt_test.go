package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A database the hand-written runner migrated keeps its history: goose
// records those versions as applied and runs only what is new; a database
// ahead of the binary is refused.
func TestApplyAdoptsTheFormerRunnersHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE schema_migrations (component text NOT NULL, version int NOT NULL, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))`,
		`CREATE TABLE a (id int)`, // what version 1 made
		`INSERT INTO schema_migrations (component, version, name) VALUES ('x', 1, 'a'), ('other', 1, 'o')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	x := migrate.Set{Component: "x", FS: fstest.MapFS{
		"0001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
		"0002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\n-- +goose Down\nDROP TABLE b;\n")},
	}}
	if err := migrate.Apply(ctx, db, x); err != nil {
		t.Fatalf("apply over the former history: %v (version 1 must not run again)", err)
	}
	var versions []int64
	rows, err := db.QueryContext(ctx, `SELECT version_id FROM goose_x WHERE is_applied ORDER BY version_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	rows.Close()
	if len(versions) != 3 || versions[1] != 1 || versions[2] != 2 {
		t.Fatalf("goose_x versions %v, want [0 1 2]", versions)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO b VALUES (1)`); err != nil {
		t.Fatalf("version 2 did not run: %v", err)
	}
	older := migrate.Set{Component: "x", FS: fstest.MapFS{
		"0001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
	}}
	if err := migrate.Apply(ctx, db, older); !errors.Is(err, migrate.ErrTooNew) {
		t.Fatalf("an older binary: %v, want ErrTooNew", err)
	}
}
