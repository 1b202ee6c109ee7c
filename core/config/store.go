package config

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/bus/routing"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the configuration tables.
var Migrations = migrate.Embedded("config", migrationFiles, "migrations")

// Channel is notified with the new revision after every change.
const Channel = "config_changed"

// Errors of the store.
var (
	ErrNotFound = errors.New("not found")
	// ErrRevisionMismatch: an update named a revision that is not the stored one.
	ErrRevisionMismatch = errors.New("the configuration changed since the revision given")
)

// Store reads and writes the configuration.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a store over pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Load reads the whole configuration.
func (s *Store) Load(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{Tenants: map[string]Tenant{}}
	// One snapshot of both tables, so the revision matches what was read.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		g, err := readGlobal(ctx, tx)
		if err != nil {
			return err
		}
		snap.Global, snap.Revision = g, g.Revision
		rows, err := tx.Query(ctx, `SELECT tenant_id, body, revision, updated_at, updated_by FROM config_tenants`)
		if err != nil {
			return err
		}
		tenants, err := pgx.CollectRows(rows, scanTenant)
		if err != nil {
			return err
		}
		for _, t := range tenants {
			snap.Tenants[t.TenantID] = t
		}
		if snap.Pauses, err = readPauses(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT revision FROM config_head`).Scan(&snap.Revision)
	})
	if err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	return snap, nil
}

// Global reads the global defaults (zero values when none are stored).
func (s *Store) Global(ctx context.Context) (Global, error) {
	return readGlobal(ctx, s.pool)
}

type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readGlobal(ctx context.Context, q queryer) (Global, error) {
	var g Global
	var body []byte
	err := q.QueryRow(ctx, `SELECT body, revision, updated_at, updated_by FROM config_global`).Scan(&body, &g.Revision, &g.UpdatedAt, &g.UpdatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return Global{}, nil
	}
	if err != nil {
		return g, fmt.Errorf("global configuration: %w", err)
	}
	return g, json.Unmarshal(body, &g)
}

// PutGlobal replaces the global defaults, recording g.UpdatedBy as who did.
// A non-zero expect must equal the stored revision (ErrRevisionMismatch
// otherwise). It returns what was stored.
func (s *Store) PutGlobal(ctx context.Context, g Global, expect int64) (Global, error) {
	body, err := json.Marshal(g)
	if err != nil {
		return g, err
	}
	err = s.change(ctx, change{scope: "global", action: "PUT", by: g.UpdatedBy}, func(tx pgx.Tx, rev int64) error {
		var current int64
		err := tx.QueryRow(ctx, `SELECT revision FROM config_global`).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if expect != 0 && expect != current {
			return fmt.Errorf("global: stored revision %d, given %d: %w", current, expect, ErrRevisionMismatch)
		}
		return tx.QueryRow(ctx, `INSERT INTO config_global (body, revision, updated_by) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET body = excluded.body, revision = excluded.revision, updated_at = now(),
				updated_by = excluded.updated_by
			RETURNING revision, updated_at`, body, rev, g.UpdatedBy).Scan(&g.Revision, &g.UpdatedAt)
	})
	return g, err
}

// SeedGlobal stores g unless global defaults exist already: the environment
// seeds a fresh database; afterwards the stored configuration rules.
func (s *Store) SeedGlobal(ctx context.Context, g Global) error {
	if stored, err := s.Global(ctx); err != nil || stored.Revision != 0 {
		return err
	}
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return s.change(ctx, change{scope: "global", action: "SEED", by: SeededBy}, func(tx pgx.Tx, rev int64) error {
		_, err := tx.Exec(ctx, `INSERT INTO config_global (body, revision, updated_by) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			body, rev, SeededBy)
		return err
	})
}

// Tenant reads a tenant's overrides.
func (s *Store) Tenant(ctx context.Context, tenant string) (Tenant, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, body, revision, updated_at, updated_by FROM config_tenants WHERE tenant_id = $1`,
		routing.Normalize(tenant))
	if err != nil {
		return Tenant{}, err
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("tenant %q: %w", tenant, ErrNotFound)
	}
	return t, err
}

// ListTenants lists tenants with overrides after the given id, by id.
func (s *Store) ListTenants(ctx context.Context, after string, limit int) ([]Tenant, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, body, revision, updated_at, updated_by FROM config_tenants
		WHERE tenant_id > $1 ORDER BY tenant_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanTenant)
}

func scanTenant(row pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	var body []byte
	if err := row.Scan(&t.TenantID, &body, &t.Revision, &t.UpdatedAt, &t.UpdatedBy); err != nil {
		return t, err
	}
	return t, json.Unmarshal(body, &t)
}

// PutTenant creates or replaces a tenant's overrides, recording t.UpdatedBy;
// expect works as in PutGlobal.
func (s *Store) PutTenant(ctx context.Context, t Tenant, expect int64) (Tenant, error) {
	t.TenantID = routing.Normalize(t.TenantID)
	body, err := json.Marshal(t)
	if err != nil {
		return t, err
	}
	err = s.change(ctx, change{scope: t.TenantID, action: "PUT", by: t.UpdatedBy}, func(tx pgx.Tx, rev int64) error {
		var current int64
		err := tx.QueryRow(ctx, `SELECT revision FROM config_tenants WHERE tenant_id = $1`, t.TenantID).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if expect != 0 && expect != current {
			return fmt.Errorf("tenant %q: stored revision %d, given %d: %w", t.TenantID, current, expect, ErrRevisionMismatch)
		}
		return tx.QueryRow(ctx, `INSERT INTO config_tenants (tenant_id, body, revision, updated_by) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant_id) DO UPDATE SET body = excluded.body, revision = excluded.revision, updated_at = now(),
				updated_by = excluded.updated_by
			RETURNING revision, updated_at`, t.TenantID, body, rev, t.UpdatedBy).Scan(&t.Revision, &t.UpdatedAt)
	})
	return t, err
}

// DeleteTenant removes a tenant's overrides (ErrNotFound when it has none);
// by names who did.
func (s *Store) DeleteTenant(ctx context.Context, tenant, by string) error {
	return s.change(ctx, change{scope: routing.Normalize(tenant), action: "DELETE", by: by}, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, `DELETE FROM config_tenants WHERE tenant_id = $1`, routing.Normalize(tenant))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("tenant %q: %w", tenant, ErrNotFound)
		}
		return err
	})
}

// SeededBy is who the environment's seed of a fresh database is recorded as.
const SeededBy = "seed"

// change is what a revision did, for config_changes.
type change struct {
	scope  string // "global" or a normalized tenant id
	action string // SEED, PUT or DELETE
	by     string
}

// Change is one revision of the configuration's audit trail.
type Change struct {
	Revision  int64
	Scope     string // "global" or a normalized tenant id
	Action    string // SEED, PUT or DELETE
	ChangedBy string
	ChangedAt time.Time
}

// Changes lists the audit trail of a scope ("global" or a tenant id), the
// newest first, up to limit.
func (s *Store) Changes(ctx context.Context, scope string, limit int) ([]Change, error) {
	if scope != "global" {
		scope = routing.Normalize(scope)
	}
	rows, err := s.pool.Query(ctx, `SELECT revision, scope, action, changed_by, changed_at FROM config_changes
		WHERE scope = $1 ORDER BY revision DESC LIMIT $2`, scope, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Change])
}

// change bumps the head revision (serializing changes: the revision checks
// in fn cannot race), runs fn with it, records who did it in config_changes
// and notifies Channel in the same transaction, so listeners hear of a change
// exactly when it is visible. (Changes are rare; the commit-time lock NOTIFY
// takes does not matter here.)
func (s *Store) change(ctx context.Context, c change, fn func(tx pgx.Tx, revision int64) error) error {
	if strings.TrimSpace(c.by) == "" {
		return errors.New("config: a change must name who makes it")
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var rev int64
		if err := tx.QueryRow(ctx, `UPDATE config_head SET revision = revision + 1 RETURNING revision`).Scan(&rev); err != nil {
			return err
		}
		if err := fn(tx, rev); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO config_changes (revision, scope, action, changed_by) VALUES ($1, $2, $3, $4)`,
			rev, c.scope, c.action, c.by); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, fmt.Sprint(rev))
		return err
	})
}
