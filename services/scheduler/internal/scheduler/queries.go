package scheduler

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// The scheduler's SQL. Every "now" is a parameter (the injected clock), never
// now(). Locks are taken in one order everywhere: the runbook version row
// (FOR SHARE, against a concurrent activation), then the batch row (FOR NO
// KEY UPDATE SKIP LOCKED: schedulers skip a batch another one is working on),
// then its phase or member rows.

// liveStatuses are the batch statuses a version transition moves; member
// changes follow batches in init_dispatched and active only.
var (
	liveStatuses   = []string{"detected", "init_dispatched", "active"}
	memberStatuses = []string{"init_dispatched", "active"}
)

const sqlOutboxIDs = `SELECT message_id FROM outbox WHERE message_id = ANY($1)`

// sqlLockActiveVersion holds the version row so it cannot be deactivated
// (runbook.Store.Apply) until the transaction ends; no row: not active now.
const sqlLockActiveVersion = `SELECT version FROM runbooks WHERE id = $1 AND is_active FOR SHARE`

// Version transitions.
const (
	sqlTransitionCandidates = `SELECT id FROM batches
		WHERE runbook_name = $1 AND runbook_id <> $2 AND status = ANY($3) ORDER BY id LIMIT $4`
	sqlLockTransition = `SELECT b.batch_start_time, b.status, r.version FROM batches b JOIN runbooks r ON r.id = b.runbook_id
		WHERE b.id = $1 AND b.runbook_id <> $2 AND b.status = ANY($3) FOR NO KEY UPDATE OF b SKIP LOCKED`
	sqlSetBatchVersion = `UPDATE batches SET runbook_id = $2 WHERE id = $1`
	sqlSkipOtherPhases = `UPDATE phase_executions SET status = 'skipped'
		WHERE batch_id = $1 AND runbook_version <> $2 AND status = 'pending'`
	sqlPhasesOfVersion = `SELECT phase_name, status FROM phase_executions WHERE batch_id = $1 AND runbook_version = $2`
	sqlRevivePhase     = `UPDATE phase_executions SET status = 'pending'
		WHERE batch_id = $1 AND runbook_version = $2 AND phase_name = $3 AND status = 'skipped'`
	sqlInitDispatched  = `UPDATE batches SET status = 'init_dispatched', init_dispatched_at = $2 WHERE id = $1`
	sqlActiveMemberIDs = `SELECT id, member_key FROM batch_members WHERE batch_id = $1 AND status = 'active' ORDER BY id`
	// sqlIgnoreApplied marks an ignore version applied once no live batch of
	// its name is governed by another version.
	sqlIgnoreApplied = `UPDATE runbooks SET ignore_overdue_applied = true
		WHERE id = $1 AND is_active AND overdue_behavior = 'ignore' AND NOT ignore_overdue_applied
		AND NOT EXISTS (SELECT 1 FROM batches WHERE runbook_name = $2 AND runbook_id <> $1 AND status = ANY($3))`
)

// Batch detection and the rows every batch starts with.
const (
	sqlKnownBatchTimes = `SELECT batch_start_time FROM batches WHERE runbook_name = $1 AND batch_start_time = ANY($2)`
	sqlInsertBatch     = `INSERT INTO batches (runbook_id, runbook_name, batch_start_time, status, detected_at, init_dispatched_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (runbook_name, batch_start_time) DO NOTHING RETURNING id`
	sqlInsertBatchMembers = `INSERT INTO batch_members (batch_id, member_key, status, added_at)
		SELECT $1, k, 'active', $3 FROM unnest($2::text[]) AS k`
	sqlInsertPhase = `INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at, runbook_version, status)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (batch_id, runbook_version, phase_name) DO NOTHING`
	sqlInsertInit = `INSERT INTO init_executions (batch_id, step_name, step_index, runbook_version, worker_id, function_name,
		params_json, status, is_poll_step, poll_interval_sec, poll_timeout_sec, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11)
		ON CONFLICT (batch_id, runbook_version, step_index) DO NOTHING`
)

// Member changes and due phases, per batch.
const (
	// sqlLockLiveBatch: the batch, still governed by the version and in one
	// of the statuses; no row when another scheduler holds it.
	sqlLockLiveBatch = `SELECT batch_start_time FROM batches WHERE id = $1 AND runbook_id = $2 AND status = ANY($3)
		FOR NO KEY UPDATE SKIP LOCKED`
	// sqlAddMembers inserts new members or brings removed ones back; a row
	// that is active already (another scheduler was first) returns nothing.
	sqlAddMembers = `INSERT INTO batch_members (batch_id, member_key, status, added_at, add_dispatched_at)
		SELECT $1, k, 'active', $3, $3 FROM unnest($2::text[]) AS k
		ON CONFLICT (batch_id, member_key) DO UPDATE
		SET status = 'active', removed_at = NULL, add_dispatched_at = EXCLUDED.add_dispatched_at
		WHERE batch_members.status = 'removed'
		RETURNING id, member_key, add_dispatched_at`

	sqlDueBatches = `SELECT DISTINCT pe.batch_id FROM phase_executions pe JOIN batches b ON b.id = pe.batch_id
		WHERE pe.status = 'pending' AND pe.due_at <= $1 AND pe.runbook_version = $3
		AND b.runbook_id = $2 AND b.status = 'active' ORDER BY 1 LIMIT $4`
	sqlClaimPhases = `SELECT id, phase_name, offset_minutes, due_at FROM phase_executions
		WHERE batch_id = $1 AND runbook_version = $2 AND status = 'pending' AND due_at <= $3
		ORDER BY due_at, id LIMIT $4 FOR UPDATE SKIP LOCKED`
	// sqlMembersWithSteps: members that have live steps of the phase already
	// (nothing the scheduler wrote; a guard, as creators check for live rows).
	sqlMembersWithSteps = `SELECT DISTINCT batch_member_id FROM step_executions
		WHERE phase_execution_id = $1 AND kind = 'phase' AND status <> 'cancelled'`
	sqlPhaseDispatched = `UPDATE phase_executions SET status = 'dispatched', dispatched_at = $2 WHERE id = $1 AND status = 'pending'`
)

// stepColumns are the step_executions columns a phase dispatch writes.
var stepColumns = []string{"phase_execution_id", "batch_member_id", "kind", "step_name", "step_index", "worker_id",
	"function_name", "params_json", "status", "error_message", "is_poll_step", "poll_interval_sec", "poll_timeout_sec",
	"on_failure", "created_at"}

// Poll checks: rows polling whose interval has passed since last_polled_at
// and that got no poll-check for that last_polled_at yet.
const (
	sqlClaimStepPolls = `WITH due AS (
			SELECT se.id, b.id AS batch_id, b.runbook_name, COALESCE(pe.runbook_version, r.version) AS version
			FROM step_executions se
			JOIN batch_members bm ON bm.id = se.batch_member_id
			JOIN batches b ON b.id = bm.batch_id
			JOIN runbooks r ON r.id = b.runbook_id
			LEFT JOIN phase_executions pe ON pe.id = se.phase_execution_id
			WHERE se.status = 'polling' AND se.last_polled_at IS NOT NULL
			AND se.last_polled_at + make_interval(secs => COALESCE(se.poll_interval_sec, 0)) <= $1
			AND (se.poll_checked_at IS NULL OR se.poll_checked_at < se.last_polled_at)
			ORDER BY se.last_polled_at, se.id LIMIT $2
			FOR UPDATE OF se SKIP LOCKED)
		UPDATE step_executions se SET poll_checked_at = $1 FROM due WHERE se.id = due.id
		RETURNING se.id, se.step_name, se.poll_count, due.batch_id, due.runbook_name, due.version`
	sqlClaimInitPolls = `WITH due AS (
			SELECT ie.id, b.id AS batch_id, b.runbook_name, ie.runbook_version AS version
			FROM init_executions ie
			JOIN batches b ON b.id = ie.batch_id
			WHERE ie.status = 'polling' AND ie.last_polled_at IS NOT NULL
			AND ie.last_polled_at + make_interval(secs => COALESCE(ie.poll_interval_sec, 0)) <= $1
			AND (ie.poll_checked_at IS NULL OR ie.poll_checked_at < ie.last_polled_at)
			ORDER BY ie.last_polled_at, ie.id LIMIT $2
			FOR UPDATE OF ie SKIP LOCKED)
		UPDATE init_executions ie SET poll_checked_at = $1 FROM due WHERE ie.id = due.id
		RETURNING ie.id, ie.step_name, ie.poll_count, due.batch_id, due.runbook_name, due.version`
)

// Queries over a version's member table. The table name comes from a stored
// version (validated by package runbook) and is quoted here as well. The
// member diffs are EXCEPT set operations: hashed or sorted whatever the
// planner believes about table sizes. (An anti-join on fresh, unanalyzed
// tables was planned as a nested loop: seconds for a 10k-member batch.)

const sqlLiveBatches = `SELECT id, batch_start_time FROM batches WHERE runbook_id = $1 AND status = ANY($2) ORDER BY id`

// currentKeys and activeKeys are the two sides of a batch's member diff:
// the current members of its time ($2) and its active batch_members ($1).
const (
	currentKeys = `SELECT _member_key FROM @T WHERE _batch_time = $2 AND _is_current`
	activeKeys  = `SELECT member_key FROM batch_members WHERE batch_id = $1 AND status = 'active'`
)

// sqlMembersDiffer: whether a batch's current members and active batch_members differ.
func sqlMembersDiffer(table string) string {
	return withTable(`SELECT EXISTS (`+currentKeys+` EXCEPT `+activeKeys+`)
		OR EXISTS (`+activeKeys+` EXCEPT `+currentKeys+`)`, table)
}

// sqlNewMemberKeys: current members of the batch time with no active batch_members row.
func sqlNewMemberKeys(table string) string {
	return withTable(`(`+currentKeys+` EXCEPT `+activeKeys+`) ORDER BY 1 LIMIT $3`, table)
}

// sqlGoneMemberKeys: active members no longer current with the batch's time
// (gone from the source, or moved to another batch time).
func sqlGoneMemberKeys(table string) string {
	return withTable(`(`+activeKeys+` EXCEPT `+currentKeys+`) ORDER BY 1 LIMIT $3`, table)
}

// sqlRemoveMembers marks members removed; a row another scheduler removed
// first returns nothing.
const sqlRemoveMembers = `UPDATE batch_members SET status = 'removed', removed_at = $3, remove_dispatched_at = $3
	WHERE batch_id = $1 AND member_key = ANY($2) AND status = 'active'
	RETURNING id, member_key, remove_dispatched_at`

// sqlHasMemberData: whether the table ever had a member (a load happened).
func sqlHasMemberData(table string) string {
	return withTable(`SELECT EXISTS (SELECT 1 FROM @T)`, table)
}

func withTable(query, table string) string {
	return strings.ReplaceAll(query, "@T", pgx.Identifier{table}.Sanitize())
}
