// Package migrate applies the numbered SQL migrations that ship inside the
// binaries, with goose (github.com/pressly/goose/v3): each file holds a
// `-- +goose Up` section and a `-- +goose Down` section, and each component
// (ledger, config, runbook, bus, worker) keeps its history in its own goose
// table, goose_<component>. Every process applies them at start; goose's
// PostgreSQL session lock makes concurrent starts safe (one migrates, the
// others wait and find nothing left to do). Operators run them ahead of a
// release, see their state or step back with `lucius migrate`.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// Set is the migrations of one owner (a component such as "ledger" or "bus").
// Files are named NNNN_description.sql, numbered from 1 without gaps.
type Set struct {
	Component string
	FS        fs.FS
}

// Migration is one parsed migration file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Load parses the migrations of a set and checks their naming, numbering and
// that each has both goose sections.
func (s Set) Load() ([]Migration, error) {
	entries, err := fs.ReadDir(s.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read %s migrations: %w", s.Component, err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("%s migration %q: name must match NNNN_description.sql", s.Component, e.Name())
		}
		body, err := fs.ReadFile(s.FS, e.Name())
		if err != nil {
			return nil, err
		}
		for _, section := range []string{"-- +goose Up", "-- +goose Down"} {
			if !strings.Contains(string(body), section) {
				return nil, fmt.Errorf("%s migration %s: no %q section (a migration that cannot be undone says so in a Down section that changes nothing)",
					s.Component, e.Name(), section)
			}
		}
		v, _ := strconv.Atoi(m[1])
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("%s migrations: expected version %d, found %d (%s)", s.Component, i+1, m.Version, m.Name)
		}
	}
	return out, nil
}

// Table is the goose table that holds the component's history.
func (s Set) Table() string { return "goose_" + s.Component }

// Provider returns goose's provider for the set over db: its own table,
// PostgreSQL's session lock, history adopted from the runner goose replaced.
func (s Set) Provider(ctx context.Context, db *sql.DB) (*goose.Provider, error) {
	if _, err := s.Load(); err != nil {
		return nil, err
	}
	store, err := database.NewStore(database.DialectPostgres, s.Table())
	if err != nil {
		return nil, err
	}
	if err := adoptHistory(ctx, db, store, s.Table(), s.Component); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.Component, err)
	}
	// Retry the lock every second (goose's default is five): processes that
	// start together wait for the one migrating, not five seconds more.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectCustom, db, s.FS, goose.WithStore(store), goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
}

// Apply brings the database up to date with every set, in order.
func Apply(ctx context.Context, db *sql.DB, sets ...Set) error {
	for _, s := range sets {
		p, err := s.Provider(ctx, db)
		if err != nil {
			return err
		}
		current, known, err := p.GetVersions(ctx)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", s.Component, err)
		}
		if current > known {
			return fmt.Errorf("migrate %s: database is at version %d but this binary knows only %d: %w", s.Component, current, known, ErrTooNew)
		}
		if current == known {
			continue // up to date: no need to take the migration lock
		}
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", s.Component, err)
		}
	}
	return nil
}

// ErrTooNew means the database was migrated by a newer binary.
var ErrTooNew = errors.New("database schema is newer than this binary")

// adoptLock serializes adopting history between processes starting together.
const adoptLock = 7_433_118_205

// adoptHistory carries a component's history over from schema_migrations,
// the table of the hand-written runner goose replaced: once, when the goose
// table does not exist yet, each version recorded there is recorded as
// applied in the goose table, so nothing runs twice.
func adoptHistory(ctx context.Context, db *sql.DB, store database.Store, table, component string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // rollback after commit is a no-op
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(adoptLock)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	var legacy, adopted bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL, to_regclass($1) IS NOT NULL`, table).
		Scan(&legacy, &adopted); err != nil {
		return err
	}
	if !legacy || adopted {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations WHERE component = $1 ORDER BY version`, component)
	if err != nil {
		return err
	}
	var versions []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		versions = append(versions, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(versions) == 0 {
		return err
	}
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return err
	}
	for _, v := range append([]int64{0}, versions...) {
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Embedded is the set of a component whose migration files are embedded in
// its package's dir (//go:embed dir/*.sql). It panics when dir is not in
// fsys: the embed directive beside the call guarantees it.
func Embedded(component string, fsys fs.FS, dir string) Set {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("migrate: %s migrations: %v", component, err))
	}
	return Set{Component: component, FS: sub}
}
