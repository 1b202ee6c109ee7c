// Package ledger is the system of record: requests, jobs, steps, attempts, the
// job event trail and the outbox, in PostgreSQL. All of Lucius's SQL for these
// tables lives here. The package stores and guards; it does not decide. State
// machine decisions belong to package engine, which runs them inside a ledger
// transaction (Store.InTx) so every state change, its events and the outbox rows
// it implies commit together.
//
// A file an aggregate: requests.go (accepting commands), jobs.go, steps.go,
// attempts.go (and the directives they carry), events.go (the audit trail),
// outbox.go, deadletters.go, ownership.go (which orchestrator runs a job,
// reclaiming orphans), admission.go (concurrency slots), sweep.go (what the
// sweepers look for), assets.go, breakers.go, definitions.go, workers.go,
// retention.go. tx.go is the transaction itself, queries.go the SQL and
// row scanners, types.go the domain types.
package ledger

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create and evolve the ledger's tables.
var Migrations = migrate.Embedded("ledger", migrationFiles, "migrations")

// Errors returned by the store.
var (
	ErrNotFound = errors.New("not found")
	// ErrIdempotencyConflict: the idempotency key was used before for a different command.
	ErrIdempotencyConflict = errors.New("idempotency key already used for a different command")
)

// NotifyChannel is the channel the store notifies after committing outbox rows,
// so the dispatcher (or deliverer) sends them without waiting for its poll.
// The payload says which of them has rows waiting (NotifyPublish, NotifyCallbacks).
const NotifyChannel = "ledger_outbox"

// Store is the ledger over a connection pool.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	notify *notifier
}

// New returns a store. The pool's database must be migrated (see Migrations).
func New(pool *pgxpool.Pool, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{pool: pool, log: log, notify: newNotifier(pool, log)}
}

// Pool is the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// InTx runs fn in a transaction and commits it with the events and outbox
// messages fn recorded. A deadlock or serialization failure retries fn (it must
// be safe to run again); any other error rolls back.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	const maxTries = 3
	for try := 1; ; try++ {
		err := s.inTx(ctx, fn)
		if err == nil || try == maxTries || !retryable(err) {
			return err
		}
		s.log.WarnContext(ctx, "retrying ledger transaction", "try", try, "err", err)
	}
}

func (s *Store) inTx(ctx context.Context, fn func(tx *Tx) error) error {
	pgtx, err := beginPipe(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer pgtx.Rollback(ctx) //nolint:errcheck // no-op after commit
	tx := &Tx{tx: pgtx}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.commit(ctx); err != nil {
		return err
	}
	if len(tx.outbox) > 0 {
		s.notify.poke(tx.waiting()...)
	}
	for _, f := range tx.committed {
		f()
	}
	return nil
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// Close stops the store's background notifier. It does not close the pool.
func (s *Store) Close() { s.notify.close() }

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// nullTime turns a zero time into SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
