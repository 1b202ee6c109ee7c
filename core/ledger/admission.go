package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Admission scopes, in the order their slots are taken and given back (one
// order everywhere, so concurrent transactions cannot deadlock).
const (
	ScopeTenant = "tenant"
	ScopeLane   = "lane"
	ScopeGlobal = "global"
)

// Limits bound the active jobs of a request's scopes; 0 means no limit.
type Limits struct {
	Tenant, Lane, Global int
}

// LimitError says which limit a request would exceed; nothing was written.
type LimitError struct {
	Scope, Key string
	Limit      int
}

func (e *LimitError) Error() string {
	if e.Scope == ScopeGlobal {
		return fmt.Sprintf("the global limit of %d active jobs is reached", e.Limit)
	}
	return fmt.Sprintf("the %s %q limit of %d active jobs is reached", e.Scope, e.Key, e.Limit)
}

// ErrLimitReached matches any *LimitError.
var ErrLimitReached = errors.New("admission limit reached")

// Is makes every LimitError match ErrLimitReached (errors.Is).
func (e *LimitError) Is(target error) bool { return target == ErrLimitReached }

// jobSlots names the scopes of one new request and their limits.
type jobSlots struct {
	tenant, lane string
	limits       Limits
}

// queueTakeSlots queues the admission of a new request in its scopes; a
// scope at its limit fails the batch with a *LimitError. It is queued last
// in the transaction (see Tx.commit), so the locks it takes are held only for
// the commit.
//
// A tenant's counter row is shared only by that tenant's own submits and
// completions. Lanes and the global scope have no counter: a hot row every
// accept and every completion updates would make each tenant's submits wait
// on every other tenant's commits, so a flooding tenant would slow everyone.
// A lane or global limit is instead checked against the live work itself,
// counted under a lock of that scope, and only while such a limit is set.
// Admissions to one scope serialize on its lock until they commit, so each
// counts every admission committed before it: the count is a statement of
// its own, after the lock, and so sees them.
func queueTakeSlots(b *pgx.Batch, c jobSlots) {
	// A refusal is an error raised by the statement itself (LUC01), so it
	// aborts the transaction even when its COMMIT is already on the way.
	refused := func(scope, key string, limit int, what string) func(pgconn.CommandTag, error) error {
		return func(_ pgconn.CommandTag, err error) error {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == codeAdmissionRefused {
				return &LimitError{Scope: scope, Key: key, Limit: limit}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
	queueChecked(b, refused(ScopeTenant, c.tenant, c.limits.Tenant, "take tenant slot"), sqlTakeSlot, c.tenant, c.limits.Tenant)
	for _, s := range sharedScopes(c.lane, c.limits) {
		queueExec(b, "lock "+s.scope+" scope", sqlLockScope, "lucius/admission/"+s.scope+"/"+s.key)
		query, args := countLiveQuery(s)
		// live counts this request too: it may reach the limit, not pass it.
		n := len(args)
		query = fmt.Sprintf(`SELECT CASE WHEN live > $%d::bigint THEN lucius_admission_refused($%d, $%d, $%d::int) ELSE live END
			FROM (%s) c(live)`, n+1, n+2, n+3, n+4, query)
		args = append(args, s.limit, s.scope, s.key, s.limit)
		queueChecked(b, refused(s.scope, s.key, s.limit, "count "+s.scope+" work"), query, args...)
	}
}

// codeAdmissionRefused is the SQLSTATE lucius_admission_refused raises.
const codeAdmissionRefused = "LUC01"

// sharedScope is a lane or the global scope with its limit.
type sharedScope struct {
	scope, key string
	limit      int
}

// sharedScopes are the lane and global scopes a request must be checked
// against: those with a limit, in locking order.
func sharedScopes(lane string, l Limits) []sharedScope {
	var out []sharedScope
	if l.Lane > 0 {
		out = append(out, sharedScope{ScopeLane, lane, l.Lane})
	}
	if l.Global > 0 {
		out = append(out, sharedScope{ScopeGlobal, "", l.Global})
	}
	return out
}

// countLiveQuery counts a shared scope's live work, stopping past its limit:
// the cost of a check is bounded by the limit, not by the backlog.
func countLiveQuery(s sharedScope) (string, []any) {
	if s.scope == ScopeLane {
		return sqlCountLane, []any{s.limit + 1, s.key}
	}
	return sqlCountGlobal, []any{s.limit + 1}
}

// precheckSlots refuses a new request whose scope is already at its limit
// before any write: refusing a flood must cost little. It only reads; the
// transaction's slot take (queueTakeSlots) decides (a slot freed meanwhile is not missed: the
// check passes, and one taken meanwhile is caught there).
func (s *Store) precheckSlots(ctx context.Context, r Request, l Limits) error {
	if l == (Limits{}) {
		return nil
	}
	var exists bool
	var tenant int
	if err := s.pool.QueryRow(ctx, sqlPrecheckSlots, r.key(), r.TenantID).Scan(&exists, &tenant); err != nil {
		return fmt.Errorf("admission check: %w", err)
	}
	if exists {
		return nil // a repeated request: Accept answers it, no new slot
	}
	if l.Tenant > 0 && tenant >= l.Tenant {
		return &LimitError{Scope: ScopeTenant, Key: r.TenantID, Limit: l.Tenant}
	}
	for _, sc := range sharedScopes(r.Routing.Mode, l) {
		var live int
		query, args := countLiveQuery(sc)
		if err := s.pool.QueryRow(ctx, query, args...).Scan(&live); err != nil {
			return fmt.Errorf("admission check: %w", err)
		}
		if live >= sc.limit {
			return &LimitError{Scope: sc.scope, Key: sc.key, Limit: sc.limit}
		}
	}
	return nil
}

// ReleaseSlot gives back a job's tenant slot when it reaches a terminal state
// (written at commit, with the transition). Lane and global scopes count live
// work directly and have nothing to give back.
func (t *Tx) ReleaseSlot(tenant string) {
	t.released = append(t.released, tenant)
}

// TenantSlots lists the tenants' counters: active jobs by tenant.
func (s *Store) TenantSlots(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, active FROM admission_usage WHERE scope = 'tenant'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var tenant string
		var active int
		if err := rows.Scan(&tenant, &active); err != nil {
			return nil, err
		}
		out[tenant] = active
	}
	return out, rows.Err()
}

// SlotRepair is a tenant counter that disagreed with the live work it counts.
type SlotRepair struct {
	Tenant       string
	Was, Counted int
}

// RepairSlots finds tenant counters that disagree with the live requests and
// jobs (a leaked or lost slot) and sets each to its exact count, recounted
// under the counter's lock so concurrent submits and completions are not
// disturbed.
func (s *Store) RepairSlots(ctx context.Context) ([]SlotRepair, error) {
	rows, err := s.pool.Query(ctx, sqlSlotMismatches)
	if err != nil {
		return nil, fmt.Errorf("slot check: %w", err)
	}
	suspects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("slot check: %w", err)
	}
	var fixed []SlotRepair
	for _, tenant := range suspects {
		r := SlotRepair{Tenant: tenant}
		err := s.InTx(ctx, func(tx *Tx) error {
			if _, err := tx.tx.Exec(ctx, sqlCreateSlot, tenant); err != nil {
				return err
			}
			if err := tx.tx.QueryRow(ctx, sqlLockSlot, tenant).Scan(&r.Was); err != nil {
				return err
			}
			if err := tx.tx.QueryRow(ctx, sqlCountTenant, tenant).Scan(&r.Counted); err != nil {
				return err
			}
			if r.Was == r.Counted {
				return nil
			}
			_, err := tx.tx.Exec(ctx, `UPDATE admission_usage SET active = $2 WHERE scope = 'tenant' AND key = $1`, tenant, r.Counted)
			return err
		})
		if err != nil {
			return fixed, fmt.Errorf("repair tenant %q: %w", tenant, err)
		}
		if r.Was != r.Counted {
			fixed = append(fixed, r)
		}
	}
	return fixed, nil
}

const (
	// sqlTakeSlot counts one more active job of tenant $1 unless it is at $2 (0: no limit).
	// (the refusal is raised: see queueTakeSlots).
	sqlTakeSlot = `WITH t AS (INSERT INTO admission_usage AS u (scope, key, active) VALUES ('tenant', $1, 1)
	ON CONFLICT (scope, key) DO UPDATE SET active = u.active + 1 WHERE $2 = 0 OR u.active < $2
	RETURNING active)
	SELECT coalesce((SELECT active FROM t), lucius_admission_refused('tenant', $1, $2))`

	sqlPrecheckSlots = `SELECT EXISTS (SELECT 1 FROM requests WHERE request_key = $1),
	coalesce((SELECT active FROM admission_usage WHERE scope = 'tenant' AND key = $2), 0)`

	sqlReleaseSlot = `UPDATE admission_usage SET active = greatest(active - 1, 0) WHERE scope = 'tenant' AND key = $1`

	sqlLockScope = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

	// The live work of a lane or of everyone, up to $1 rows of each kind:
	// requests no orchestrator claimed yet and jobs not yet terminal (claiming
	// sets claimed_at in the job's transaction, so no job counts twice).
	sqlCountLane = `SELECT (SELECT count(*) FROM (SELECT FROM requests WHERE claimed_at IS NULL AND resolved_mode = $2 LIMIT $1) r)
	+ (SELECT count(*) FROM (SELECT FROM jobs WHERE completed_at IS NULL AND resolved_mode = $2 LIMIT $1) j)`
	sqlCountGlobal = `SELECT (SELECT count(*) FROM (SELECT FROM requests WHERE claimed_at IS NULL LIMIT $1) r)
	+ (SELECT count(*) FROM (SELECT FROM jobs WHERE completed_at IS NULL LIMIT $1) j)`

	sqlCreateSlot = `INSERT INTO admission_usage (scope, key) VALUES ('tenant', $1) ON CONFLICT DO NOTHING`
	sqlLockSlot   = `SELECT active FROM admission_usage WHERE scope = 'tenant' AND key = $1 FOR UPDATE`

	sqlLiveTenants = `SELECT tenant_id FROM requests WHERE claimed_at IS NULL
	UNION ALL SELECT tenant_id FROM jobs WHERE completed_at IS NULL`

	sqlCountTenant = `SELECT count(*) FROM (` + sqlLiveTenants + `) l WHERE l.tenant_id = $1`

	// sqlSlotMismatches compares every tenant counter with one consistent count.
	sqlSlotMismatches = `WITH counted AS (SELECT tenant_id AS key, count(*) AS n FROM (` + sqlLiveTenants + `) l GROUP BY tenant_id),
	usage AS (SELECT key, active FROM admission_usage WHERE scope = 'tenant')
	SELECT coalesce(c.key, u.key) FROM counted c FULL JOIN usage u ON u.key = c.key
	WHERE coalesce(c.n, 0) <> coalesce(u.active, 0)
	ORDER BY 1`
)
