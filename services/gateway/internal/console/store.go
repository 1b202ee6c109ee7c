package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the console's tables (tickets and sessions).
var Migrations = migrate.Embedded("console", migrationFiles, "migrations")

// Why a ticket or a session is refused. Callers learn no more than that:
// malformed, unknown, used and expired look the same.
var (
	ErrTicketInvalid  = errors.New("the login ticket is unknown, used or expired")
	ErrSessionInvalid = errors.New("the console session is unknown or expired")
)

const (
	sqlInsertTicket = `INSERT INTO console_tickets (ticket_hash, principal, landing, expires_at) VALUES ($1, $2, $3, $4)`
	// sqlTakeTicket deletes the ticket as it reads it: of two logins racing
	// with one ticket, only one gets a row.
	sqlTakeTicket    = `DELETE FROM console_tickets WHERE ticket_hash = $1 RETURNING principal, landing, expires_at`
	sqlInsertSession = `INSERT INTO console_sessions (session_hash, principal, expires_at) VALUES ($1, $2, $3)`
	sqlSession       = `SELECT principal, expires_at FROM console_sessions WHERE session_hash = $1 AND expires_at > $2`
	sqlEndSession    = `DELETE FROM console_sessions WHERE session_hash = $1`
	sqlPurgeTickets  = `DELETE FROM console_tickets WHERE expires_at <= $1`
	sqlPurgeSessions = `DELETE FROM console_sessions WHERE expires_at <= $1`
)

// Store keeps tickets and sessions in PostgreSQL, so every gateway instance
// honours a ticket or a session another one issued.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// NewStore returns a store over pool (its tables come with Migrations).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, now: time.Now} }

// CreateTicket mints a single-use ticket for p that expires after ttl and
// leads to landing, and forgets tickets and sessions that expired.
func (s *Store) CreateTicket(ctx context.Context, p *auth.Principal, landing string, ttl time.Duration) (string, time.Time, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("encode principal: %w", err)
	}
	now := s.now()
	ticket := newSecret(ticketPrefix)
	hash, _ := parseSecret(ticketPrefix, ticket)
	expires := now.Add(ttl)
	if _, err := s.pool.Exec(ctx, sqlInsertTicket, hash, body, landing, expires); err != nil {
		return "", time.Time{}, fmt.Errorf("store ticket: %w", err)
	}
	for _, q := range []string{sqlPurgeTickets, sqlPurgeSessions} {
		if _, err := s.pool.Exec(ctx, q, now); err != nil {
			return "", time.Time{}, fmt.Errorf("purge expired: %w", err)
		}
	}
	return ticket, expires, nil
}

// Redeem uses a ticket up and opens a session of its principal for ttl: it
// returns the session id, where the ticket leads, and when the session ends.
func (s *Store) Redeem(ctx context.Context, ticket string, ttl time.Duration) (session, landing string, expires time.Time, err error) {
	hash, err := parseSecret(ticketPrefix, ticket)
	if err != nil {
		return "", "", time.Time{}, ErrTicketInvalid
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var principal []byte
		var ticketExpires time.Time
		err := tx.QueryRow(ctx, sqlTakeTicket, hash).Scan(&principal, &landing, &ticketExpires)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTicketInvalid
		}
		if err != nil {
			return fmt.Errorf("take ticket: %w", err)
		}
		now := s.now()
		if !now.Before(ticketExpires) {
			return ErrTicketInvalid // deleted all the same: the DELETE commits below
		}
		session = newSecret(sessionPrefix)
		sessionHash, _ := parseSecret(sessionPrefix, session)
		expires = now.Add(ttl)
		if _, err := tx.Exec(ctx, sqlInsertSession, sessionHash, principal, expires); err != nil {
			return fmt.Errorf("store session: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrTicketInvalid) {
		// Commit the expired ticket's deletion too: BeginFunc rolled it back.
		_, _ = s.pool.Exec(ctx, sqlTakeTicket, hash)
	}
	if err != nil {
		return "", "", time.Time{}, err
	}
	return session, landing, expires, nil
}

// OpenSession opens a session of p for ttl without a ticket (an OIDC
// sign-in, whose token was just verified).
func (s *Store) OpenSession(ctx context.Context, p *auth.Principal, ttl time.Duration) (string, time.Time, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("encode principal: %w", err)
	}
	session := newSecret(sessionPrefix)
	hash, _ := parseSecret(sessionPrefix, session)
	expires := s.now().Add(ttl)
	if _, err := s.pool.Exec(ctx, sqlInsertSession, hash, body, expires); err != nil {
		return "", time.Time{}, fmt.Errorf("store session: %w", err)
	}
	return session, expires, nil
}

// Session returns the principal of a live session (auth.SessionStore).
func (s *Store) Session(ctx context.Context, id string) (*auth.Principal, error) {
	p, _, err := s.lookup(ctx, id)
	return p, err
}

// lookup returns a live session's principal and end.
func (s *Store) lookup(ctx context.Context, id string) (*auth.Principal, time.Time, error) {
	hash, err := parseSecret(sessionPrefix, id)
	if err != nil {
		return nil, time.Time{}, ErrSessionInvalid
	}
	var body []byte
	var expires time.Time
	err = s.pool.QueryRow(ctx, sqlSession, hash, s.now()).Scan(&body, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, ErrSessionInvalid
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read session: %w", err)
	}
	p := &auth.Principal{}
	if err := json.Unmarshal(body, p); err != nil {
		return nil, time.Time{}, fmt.Errorf("decode session principal: %w", err)
	}
	return p, expires, nil
}

// EndSession forgets a session (logout). An unknown one is not an error.
func (s *Store) EndSession(ctx context.Context, id string) error {
	hash, err := parseSecret(sessionPrefix, id)
	if err != nil {
		return nil
	}
	if _, err := s.pool.Exec(ctx, sqlEndSession, hash); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}
