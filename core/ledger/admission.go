package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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

func (e *LimitError) Is(target error) bool { return target == ErrLimitReached }

type slotKey struct{ scope, key string }

// slotKeys are a job's three scopes, in locking order.
func slotKeys(tenant, lane string) []slotKey {
	return []slotKey{{ScopeTenant, tenant}, {ScopeLane, lane}, {ScopeGlobal, ""}}
}

// jobSlots names the scopes of one job.
type jobSlots struct {
	tenant, lane string
	limits       Limits
}

// takeSlots counts a new request in its scopes unless one is at its limit.
// It runs last in the transaction (see flush), so the hot lane and global
// rows stay locked only for the commit.
func (t *Tx) takeSlots(ctx context.Context, c jobSlots) error {
	for i, k := range slotKeys(c.tenant, c.lane) {
		limit := []int{c.limits.Tenant, c.limits.Lane, c.limits.Global}[i]
		var active int
		err := t.tx.QueryRow(ctx, sqlTakeSlot, k.scope, k.key, limit).Scan(&active)
		if isNoRows(err) {
			return &LimitError{Scope: k.scope, Key: k.key, Limit: limit}
		}
		if err != nil {
			return fmt.Errorf("take %s slot: %w", k.scope, err)
		}
	}
	return nil
}

// precheckSlots refuses a new request whose scope is already at its limit
// before any write: refusing a flood must cost little. It only reads; the
// transaction's takeSlots decides (a slot freed meanwhile is not missed: the
// check passes, and one taken meanwhile is caught there).
func (s *Store) precheckSlots(ctx context.Context, r Request, l Limits) error {
	if l == (Limits{}) {
		return nil
	}
	var exists bool
	var tenant, lane, global int
	if err := s.pool.QueryRow(ctx, sqlPrecheckSlots, r.JobID, r.TenantID, r.Routing.Mode).Scan(&exists, &tenant, &lane, &global); err != nil {
		return fmt.Errorf("admission check: %w", err)
	}
	if exists {
		return nil // a repeated request: Accept answers it, no new slot
	}
	for _, c := range []struct {
		scope, key    string
		active, limit int
	}{{ScopeTenant, r.TenantID, tenant, l.Tenant}, {ScopeLane, r.Routing.Mode, lane, l.Lane}, {ScopeGlobal, "", global, l.Global}} {
		if c.limit > 0 && c.active >= c.limit {
			return &LimitError{Scope: c.scope, Key: c.key, Limit: c.limit}
		}
	}
	return nil
}

// ReleaseSlots gives back a job's slots when it reaches a terminal state
// (written at commit, with the transition).
func (t *Tx) ReleaseSlots(tenant, lane string) {
	t.released = append(t.released, jobSlots{tenant: tenant, lane: lane})
}

func (t *Tx) releaseSlots(ctx context.Context) error {
	for _, r := range t.released {
		for _, k := range slotKeys(r.tenant, r.lane) {
			if _, err := t.tx.Exec(ctx, sqlReleaseSlot, k.scope, k.key); err != nil {
				return fmt.Errorf("release %s slot: %w", k.scope, err)
			}
		}
	}
	return nil
}

// SlotUsage is one scope's counter.
type SlotUsage struct {
	Scope, Key string
	Active     int
}

// Usage lists the counters.
func (s *Store) Usage(ctx context.Context) ([]SlotUsage, error) {
	rows, err := s.pool.Query(ctx, `SELECT scope, key, active FROM admission_usage ORDER BY scope, key`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (SlotUsage, error) {
		var u SlotUsage
		return u, row.Scan(&u.Scope, &u.Key, &u.Active)
	})
}

// SlotRepair is a counter that disagreed with the live work it counts.
type SlotRepair struct {
	Scope, Key   string
	Was, Counted int
}

// RepairSlots finds counters that disagree with the live requests and jobs
// (a leaked or lost slot) and sets each to its exact count, recounted under
// the counter's lock so concurrent submits and completions are not disturbed.
func (s *Store) RepairSlots(ctx context.Context) ([]SlotRepair, error) {
	rows, err := s.pool.Query(ctx, sqlSlotMismatches)
	if err != nil {
		return nil, fmt.Errorf("slot check: %w", err)
	}
	suspects, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (slotKey, error) {
		var k slotKey
		return k, row.Scan(&k.scope, &k.key)
	})
	if err != nil {
		return nil, fmt.Errorf("slot check: %w", err)
	}
	var fixed []SlotRepair
	for _, k := range suspects {
		var r SlotRepair
		err := s.InTx(ctx, func(tx *Tx) error {
			r = SlotRepair{Scope: k.scope, Key: k.key}
			if _, err := tx.tx.Exec(ctx, sqlCreateSlot, k.scope, k.key); err != nil {
				return err
			}
			if err := tx.tx.QueryRow(ctx, sqlLockSlot, k.scope, k.key).Scan(&r.Was); err != nil {
				return err
			}
			if err := tx.tx.QueryRow(ctx, sqlCountLive, k.scope, k.key).Scan(&r.Counted); err != nil {
				return err
			}
			if r.Was == r.Counted {
				return nil
			}
			_, err := tx.tx.Exec(ctx, `UPDATE admission_usage SET active = $3 WHERE scope = $1 AND key = $2`, k.scope, k.key, r.Counted)
			return err
		})
		if err != nil {
			return fixed, fmt.Errorf("repair %s %q: %w", k.scope, k.key, err)
		}
		if r.Was != r.Counted {
			fixed = append(fixed, r)
		}
	}
	return fixed, nil
}

const (
	// sqlTakeSlot counts one more active job unless the scope is at $3 (0: no limit).
	sqlTakeSlot = `INSERT INTO admission_usage AS u (scope, key, active) VALUES ($1, $2, 1)
	ON CONFLICT (scope, key) DO UPDATE SET active = u.active + 1 WHERE $3 = 0 OR u.active < $3
	RETURNING active`

	sqlPrecheckSlots = `SELECT EXISTS (SELECT 1 FROM requests WHERE job_id = $1),
	coalesce((SELECT active FROM admission_usage WHERE scope = 'tenant' AND key = $2), 0),
	coalesce((SELECT active FROM admission_usage WHERE scope = 'lane' AND key = $3), 0),
	coalesce((SELECT active FROM admission_usage WHERE scope = 'global' AND key = ''), 0)`

	sqlReleaseSlot = `UPDATE admission_usage SET active = greatest(active - 1, 0) WHERE scope = $1 AND key = $2`

	sqlCreateSlot = `INSERT INTO admission_usage (scope, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	sqlLockSlot   = `SELECT active FROM admission_usage WHERE scope = $1 AND key = $2 FOR UPDATE`

	// live is the work holding slots: requests no orchestrator claimed yet and
	// jobs not yet terminal (claiming sets claimed_at in the job's transaction).
	sqlLive = `SELECT tenant_id, resolved_mode FROM requests WHERE claimed_at IS NULL
	UNION ALL SELECT tenant_id, resolved_mode FROM jobs WHERE completed_at IS NULL`

	sqlCountLive = `SELECT count(*) FROM (` + sqlLive + `) l
	WHERE ($1 = 'tenant' AND l.tenant_id = $2) OR ($1 = 'lane' AND l.resolved_mode = $2) OR $1 = 'global'`

	// sqlSlotMismatches compares every counter with one consistent count.
	sqlSlotMismatches = `WITH live AS (` + sqlLive + `),
	counted AS (
		SELECT 'tenant' AS scope, tenant_id AS key, count(*) AS n FROM live GROUP BY tenant_id
		UNION ALL SELECT 'lane', resolved_mode, count(*) FROM live GROUP BY resolved_mode
		UNION ALL SELECT 'global', '', count(*) FROM live)
	SELECT coalesce(c.scope, u.scope), coalesce(c.key, u.key) FROM counted c
	FULL JOIN admission_usage u ON u.scope = c.scope AND u.key = c.key
	WHERE coalesce(c.n, 0) <> coalesce(u.active, 0)
	ORDER BY 1, 2`
)
