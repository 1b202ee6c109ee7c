// Package migrate applies numbered SQL migrations that ship inside the binaries.
// Every process applies them at start; a transaction-scoped advisory lock makes
// concurrent starts safe: one process migrates, the others wait and find nothing
// left to do.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Set is the migrations of one owner (a component such as "ledger" or "bus").
// Files are named NNNN_description.sql and applied in number order.
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

// lockKey is the advisory lock every migrating process takes.
const lockKey = 7_433_118_205

// Load parses the migrations of a set and checks their numbering.
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

// Conn is what Apply needs: a pool or a single connection.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Apply brings the database up to date with every set, in order.
func Apply(ctx context.Context, db Conn, sets ...Set) error {
	for _, s := range sets {
		if err := applySet(ctx, db, s); err != nil {
			return err
		}
	}
	return nil
}

func applySet(ctx context.Context, db Conn, s Set) error {
	migrations, err := s.Load()
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.Component, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rollback after commit is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
		return fmt.Errorf("migrate %s: lock: %w", s.Component, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		component  text        NOT NULL,
		version    int         NOT NULL,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (component, version))`); err != nil {
		return fmt.Errorf("migrate %s: create schema_migrations: %w", s.Component, err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations WHERE component = $1`, s.Component).Scan(&current); err != nil {
		return fmt.Errorf("migrate %s: read version: %w", s.Component, err)
	}
	if current > len(migrations) {
		return fmt.Errorf("migrate %s: database is at version %d but this binary knows only %d: %w", s.Component, current, len(migrations), ErrTooNew)
	}
	for _, m := range migrations[current:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %s %04d_%s: %w", s.Component, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (component, version, name) VALUES ($1, $2, $3)`, s.Component, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %s: record %d: %w", s.Component, m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", s.Component, err)
	}
	return nil
}

// ErrTooNew means the database was migrated by a newer binary.
var ErrTooNew = errors.New("database schema is newer than this binary")
