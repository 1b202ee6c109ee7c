package ledger

import (
	"context"
	"fmt"
	"time"
)

// Tenants lists every tenant that ever had a request accepted (each has an
// admission counter).
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT key FROM admission_usage WHERE scope = 'tenant' ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("tenants: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// PurgeFinished deletes up to limit of tenant's jobs that ended before
// cutoff, oldest first, with everything the ledger keeps of them: request,
// steps (with their polls and holds), attempts, events, outbox rows and dead
// letters, in one transaction. Jobs that made an asset revision are kept: the
// asset's history names them. It returns how many jobs it deleted.
func (s *Store) PurgeFinished(ctx context.Context, tenant string, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, sqlPurgeFinished, tenant, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("purge finished jobs of %s: %w", tenant, err)
	}
	return tag.RowsAffected(), nil
}

// sqlPurgeFinished deletes in one statement: every data-modifying CTE runs,
// and the foreign keys between the tables are checked at its end, when the
// rows on both sides are gone. SKIP LOCKED leaves a job another transaction
// holds (a replay reading it) to a later round.
const sqlPurgeFinished = `WITH doomed AS (
		SELECT j.job_id FROM jobs j
		WHERE j.tenant_id = $1 AND j.completed_at IS NOT NULL AND j.completed_at < $2
		  AND NOT EXISTS (SELECT 1 FROM asset_revisions ar WHERE ar.job_id = j.job_id)
		ORDER BY j.completed_at LIMIT $3
		FOR UPDATE OF j SKIP LOCKED),
	events AS (DELETE FROM job_events e USING doomed d WHERE e.job_id = d.job_id),
	polls AS (DELETE FROM step_polls p USING doomed d WHERE p.job_id = d.job_id),
	holds AS (DELETE FROM step_holds h USING doomed d WHERE h.job_id = d.job_id),
	attempts AS (DELETE FROM attempts a USING doomed d WHERE a.job_id = d.job_id),
	steps AS (DELETE FROM steps s USING doomed d WHERE s.job_id = d.job_id),
	outbox AS (DELETE FROM outbox o USING doomed d WHERE o.job_id = d.job_id),
	dead AS (DELETE FROM dead_letters x USING doomed d WHERE x.job_id = d.job_id),
	jobs AS (DELETE FROM jobs j USING doomed d WHERE j.job_id = d.job_id)
	DELETE FROM requests r USING doomed d WHERE r.job_id = d.job_id`
