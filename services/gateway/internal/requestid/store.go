package requestid

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the request_ids table.
var Migrations = migrate.Embedded("requestid", migrationFiles, "migrations")

const (
	// sqlReserve inserts a running reservation, or takes over a row that
	// expired, or one left running past staleBefore ($7) by a call that
	// never finished (a crashed gateway) for the same request. Otherwise it
	// returns no row: someone holds the id.
	sqlReserve = `INSERT INTO request_ids AS r (scope, method, request_id, request_hash, state, token, reserved_at, expire_at)
VALUES ($1, $2, $3, $4, 'running', gen_random_uuid(), $5, $6)
ON CONFLICT (scope, method, request_id) DO UPDATE
SET request_hash = EXCLUDED.request_hash, state = 'running', token = EXCLUDED.token, code = 0, answer = NULL,
    reserved_at = EXCLUDED.reserved_at, expire_at = EXCLUDED.expire_at
WHERE r.expire_at <= $5 OR (r.state = 'running' AND r.reserved_at <= $7 AND r.request_hash = EXCLUDED.request_hash)
RETURNING token::text`
	sqlLookup = `SELECT request_hash, state, code, answer FROM request_ids
WHERE scope = $1 AND method = $2 AND request_id = $3 AND expire_at > $4`
	sqlComplete = `UPDATE request_ids SET state = 'done', code = $5, answer = $6
WHERE scope = $1 AND method = $2 AND request_id = $3 AND token = $4::uuid`
	sqlRelease = `DELETE FROM request_ids WHERE scope = $1 AND method = $2 AND request_id = $3 AND token = $4::uuid`
	// sqlPurge deletes at most $2 expired rows: cleanup is lazy and bounded.
	sqlPurge = `DELETE FROM request_ids WHERE ctid = ANY(ARRAY(
SELECT ctid FROM request_ids WHERE expire_at <= $1 LIMIT $2))`
)

// Key names one remembered request: who sent it (the principal's
// issuer#subject), to which method, under which id.
type Key struct {
	Scope, Method, RequestID string
}

// State is what a reservation found.
type State int

const (
	// Reserved means: the id is this call's; run it, then Complete or Release.
	Reserved State = iota + 1
	// Done means: a call with this id and body finished; Record holds its answer.
	Done
	// Running means: a call with this id and body is still running.
	Running
	// Mismatch means: the id was used for a different request body.
	Mismatch
)

// Reservation is the outcome of Reserve.
type Reservation struct {
	State State
	// Token fences Complete and Release (Reserved only): a reservation
	// taken over after it went stale cannot be completed by its first owner.
	Token string
	// Code and Answer (Done only): the gRPC code and the marshaled response
	// (codes.OK) or google.rpc.Status.
	Code   codes.Code
	Answer []byte
}

// Store keeps request ids in PostgreSQL, so every gateway instance answers a
// retry another one served first.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time
	// lastPurge (unix nanoseconds) spaces the purges purgeEvery apart, so
	// a busy gateway, or a duplicate polling for an answer, does not
	// delete on every call.
	lastPurge atomic.Int64
}

// purgeEvery is the least time between two purges of one store.
const purgeEvery = time.Second

// NewStore returns a store over pool (its table comes with Migrations).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, now: time.Now} }

// purgeBatch bounds the expired rows one reservation deletes.
const purgeBatch = 100

// Reserve claims k for a request whose canonical form hashes to hash, to be
// remembered for ttl; a running reservation older than staleAfter with the
// same hash is taken over. It also deletes a batch of expired ids, at most
// once every purgeEvery.
func (s *Store) Reserve(ctx context.Context, k Key, hash []byte, ttl, staleAfter time.Duration) (Reservation, error) {
	now := s.now()
	if last := s.lastPurge.Load(); now.UnixNano()-last >= int64(purgeEvery) && s.lastPurge.CompareAndSwap(last, now.UnixNano()) {
		if _, err := s.pool.Exec(ctx, sqlPurge, now, purgeBatch); err != nil {
			return Reservation{}, fmt.Errorf("purge request ids: %w", err)
		}
	}
	for {
		var token string
		err := s.pool.QueryRow(ctx, sqlReserve, k.Scope, k.Method, k.RequestID, hash, now, now.Add(ttl), now.Add(-staleAfter)).Scan(&token)
		if err == nil {
			return Reservation{State: Reserved, Token: token}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Reservation{}, fmt.Errorf("reserve request id %q: %w", k.RequestID, err)
		}
		var (
			stored []byte
			state  string
			code   int32
			answer []byte
		)
		err = s.pool.QueryRow(ctx, sqlLookup, k.Scope, k.Method, k.RequestID, now).Scan(&stored, &state, &code, &answer)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released or expired meanwhile: reserve again
		}
		if err != nil {
			return Reservation{}, fmt.Errorf("read request id %q: %w", k.RequestID, err)
		}
		switch {
		case !bytes.Equal(stored, hash):
			return Reservation{State: Mismatch}, nil
		case state == "running":
			return Reservation{State: Running}, nil
		default:
			return Reservation{State: Done, Code: codes.Code(code), Answer: answer}, nil
		}
	}
}

// Complete stores the answer of the call holding token.
func (s *Store) Complete(ctx context.Context, k Key, token string, code codes.Code, answer []byte) error {
	if _, err := s.pool.Exec(ctx, sqlComplete, k.Scope, k.Method, k.RequestID, token, int32(code), answer); err != nil {
		return fmt.Errorf("complete request id %q: %w", k.RequestID, err)
	}
	return nil
}

// Release forgets the id held by token, so a retry runs the call again.
func (s *Store) Release(ctx context.Context, k Key, token string) error {
	if _, err := s.pool.Exec(ctx, sqlRelease, k.Scope, k.Method, k.RequestID, token); err != nil {
		return fmt.Errorf("release request id %q: %w", k.RequestID, err)
	}
	return nil
}
