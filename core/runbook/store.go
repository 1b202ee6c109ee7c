package runbook

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the runbook tables (not the per-version member tables,
// which Apply creates).
var Migrations = migrate.Embedded("runbook", migrationFiles, "migrations")

// Errors of the store.
var (
	ErrNotFound = errors.New("not found")
	// ErrVersionExists: a version is immutable; this one is stored with other content.
	ErrVersionExists = errors.New("the runbook version exists with different content")
	// ErrInvalidMembers wraps the problems of member rows LoadMembers refused.
	ErrInvalidMembers = errors.New("invalid member data")
)

// Querier is what the member reads run on: the pool, a pgx.Tx, or a ledger
// transaction's SQL().
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store keeps runbook versions and their member data.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a store over pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// StoredRunbook is a stored version.
type StoredRunbook struct {
	ID      int64
	Runbook *Runbook
	// DataTable is the version's member table (DataTableName).
	DataTable string
	// ContentHash is the hex SHA-256 of the YAML.
	ContentHash string
	// Active: this version governs the runbook's batches (one per name).
	Active               bool
	IgnoreOverdueApplied bool
	CreatedAt            time.Time
	// ActivatedAt is when the version last became active (zero: never).
	ActivatedAt time.Time
	// CreatedBy applied the version first; ActivatedBy last made it active
	// (issuer#subject).
	CreatedBy, ActivatedBy string
}

// ContentHash is the hex SHA-256 of a runbook's YAML, as stored.
func ContentHash(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:])
}

// Apply stores (or finds, same content) a version, creates its member table
// and makes it the active version of its name. Different content under an
// existing (name, version) is ErrVersionExists. rb must come from Parse: the
// stored row is derived from rb.Source, which must agree with rb. created
// reports whether the version is new; by names who applied it.
func (s *Store) Apply(ctx context.Context, rb *Runbook, by string) (stored *StoredRunbook, created bool, err error) {
	if rb == nil {
		return nil, false, errors.New("apply runbook: nil runbook")
	}
	if strings.TrimSpace(by) == "" {
		return nil, false, errors.New("apply runbook: it must name who applies it")
	}
	label := fmt.Sprintf("%s v%d", rb.Name, rb.Version)
	// Re-parse the source: the identifiers that reach SQL (the table and
	// column names) are then exactly what the stored YAML declares, validated.
	src, err := Parse(label, rb.Source)
	if err != nil {
		return nil, false, fmt.Errorf("apply runbook %s: %w", label, err)
	}
	if src.Name != rb.Name || src.Version != rb.Version || !slices.Equal(src.Columns, rb.Columns) {
		return nil, false, fmt.Errorf("apply runbook %s: the runbook does not match its source (%s v%d)", label, src.Name, src.Version)
	}
	hash := ContentHash(src.Source)
	table := DataTableName(src.Name, src.Version)
	columns := src.Columns
	if columns == nil {
		columns = []string{}
	}
	var id int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Applies of one name take turns: the activation flip below must see
		// every committed version of the name.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "lucius/runbook/"+src.Name); err != nil {
			return err
		}
		var storedHash string
		err := tx.QueryRow(ctx, `SELECT id, content_hash FROM runbooks WHERE name = $1 AND version = $2`,
			src.Name, src.Version).Scan(&id, &storedHash)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = tx.QueryRow(ctx, `INSERT INTO runbooks (name, version, yaml_content, content_hash, data_table_name,
				columns, overdue_behavior, rerun_init, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
				src.Name, src.Version, string(src.Source), hash, table, columns, src.OverdueBehavior, src.RerunInit, by).Scan(&id)
			if isUniqueViolation(err, "runbooks_data_table_name_key") {
				return fmt.Errorf("member table %s is taken by another runbook version (a name hash collision; rename the runbook)", table)
			}
			if err != nil {
				return err
			}
			created = true
		case err != nil:
			return err
		case storedHash != hash:
			return ErrVersionExists
		}
		// Also for a stored version: recreates a table dropped by hand and
		// checks that the table there has the version's columns.
		if err := createDataTable(ctx, tx, table, columns); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runbooks SET is_active = false WHERE name = $1 AND is_active AND id <> $2`, src.Name, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runbooks SET is_active = true, activated_at = now(), activated_by = $2 WHERE id = $1 AND NOT is_active`, id, by); err != nil {
			return err
		}
		stored, err = getRunbook(ctx, tx, `WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("apply runbook %s: %w", label, err)
	}
	return stored, created, nil
}

func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

const selectRunbook = `SELECT id, name, version, yaml_content, content_hash, data_table_name, columns, is_active,
	ignore_overdue_applied, created_at, activated_at, created_by, activated_by FROM runbooks `

// Get returns a stored version; version 0 is the active one. ErrNotFound
// when there is none.
func (s *Store) Get(ctx context.Context, name string, version int) (*StoredRunbook, error) {
	var (
		sr  *StoredRunbook
		err error
	)
	if version == 0 {
		sr, err = s.get(ctx, `WHERE name = $1 AND is_active`, name)
	} else {
		sr, err = s.get(ctx, `WHERE name = $1 AND version = $2`, name, version)
	}
	if err != nil {
		return nil, fmt.Errorf("runbook %s v%d: %w", name, version, err)
	}
	return sr, nil
}

// GetByID returns the version stored with id (batches.runbook_id).
func (s *Store) GetByID(ctx context.Context, id int64) (*StoredRunbook, error) {
	sr, err := s.get(ctx, `WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("runbook %d: %w", id, err)
	}
	return sr, nil
}

func (s *Store) get(ctx context.Context, where string, args ...any) (*StoredRunbook, error) {
	return getRunbook(ctx, s.pool, where, args...)
}

func getRunbook(ctx context.Context, q Querier, where string, args ...any) (*StoredRunbook, error) {
	rows, err := q.Query(ctx, selectRunbook+where, args...)
	if err != nil {
		return nil, err
	}
	sr, err := pgx.CollectExactlyOneRow(rows, scanRunbook)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return sr, err
}

// List returns every stored version, by name, the latest version first.
func (s *Store) List(ctx context.Context) ([]*StoredRunbook, error) {
	return s.list(ctx, `ORDER BY name, version DESC`)
}

// Active returns the active version of every runbook, by name.
func (s *Store) Active(ctx context.Context) ([]*StoredRunbook, error) {
	return s.list(ctx, `WHERE is_active ORDER BY name`)
}

// ActiveIDs returns the ids of the active versions, by name, without loading
// them: a caller that must go on when one stored version fails to load
// (GetByID) lists them this way.
func (s *Store) ActiveIDs(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM runbooks WHERE is_active ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list active runbooks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list active runbooks: %w", err)
	}
	return ids, nil
}

func (s *Store) list(ctx context.Context, tail string) ([]*StoredRunbook, error) {
	rows, err := s.pool.Query(ctx, selectRunbook+tail)
	if err != nil {
		return nil, fmt.Errorf("list runbooks: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanRunbook)
	if err != nil {
		return nil, fmt.Errorf("list runbooks: %w", err)
	}
	return out, nil
}

// scanRunbook reads a row and parses its YAML again (versions are few and
// small; the parsed form is what every layer works with).
func scanRunbook(row pgx.CollectableRow) (*StoredRunbook, error) {
	var (
		sr        StoredRunbook
		name, src string
		version   int
		columns   []string
		activated *time.Time
	)
	if err := row.Scan(&sr.ID, &name, &version, &src, &sr.ContentHash, &sr.DataTable, &columns, &sr.Active,
		&sr.IgnoreOverdueApplied, &sr.CreatedAt, &activated, &sr.CreatedBy, &sr.ActivatedBy); err != nil {
		return nil, err
	}
	rb, err := Parse(fmt.Sprintf("%s v%d", name, version), []byte(src))
	if err != nil {
		return nil, fmt.Errorf("stored runbook %s v%d no longer parses: %w", name, version, err)
	}
	if rb.Name != name || rb.Version != version || !slices.Equal(rb.Columns, columns) {
		return nil, fmt.Errorf("stored runbook %s v%d: its row and its YAML disagree", name, version)
	}
	if err := checkDataTable(sr.DataTable); err != nil {
		return nil, fmt.Errorf("stored runbook %s v%d: %w", name, version, err)
	}
	sr.Runbook = rb
	if activated != nil {
		sr.ActivatedAt = *activated
	}
	return &sr, nil
}
