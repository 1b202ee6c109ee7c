package runbook

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/core/ledger"
)

// The scheduler's reads and writes of batches, members and executions. Every
// "now" is a parameter (the scheduler's clock), never now(). Locks are taken
// in one order everywhere: the runbook version row (FOR SHARE, against a
// concurrent activation), then the batch row (FOR NO KEY UPDATE SKIP LOCKED:
// schedulers skip a batch another one is working on), then its phase or
// member rows.

// Schedule is what the scheduler changes in one ledger transaction (its
// events go to the ledger's outbox in the same transaction).
type Schedule struct {
	tx    pgx.Tx
	store *Store
}

// ScheduleInLedgerTx returns the schedule as seen by tx.
func (s *Store) ScheduleInLedgerTx(tx *ledger.Tx) *Schedule { return &Schedule{tx: tx.SQL(), store: s} }

// LockActiveVersion holds a runbook version active until the transaction
// ends; false: it is not active any more.
func (q *Schedule) LockActiveVersion(ctx context.Context, id int64) (bool, error) {
	var version int
	err := q.tx.QueryRow(ctx, `SELECT version FROM runbooks WHERE id = $1 AND is_active FOR SHARE`, id).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// CurrentMembers are the current members of a member table with a batch time.
func (q *Schedule) CurrentMembers(ctx context.Context, table string, batchTime time.Time) ([]Member, error) {
	return q.store.CurrentMembers(ctx, q.tx, table, batchTime)
}

// NewBatch is a batch the scheduler detected.
type NewBatch struct {
	RunbookID int64
	Name      string
	Start     time.Time
	Status    string
	Members   []string   // member keys
	InitAt    *time.Time // when init was dispatched (nil: no init steps)
}

// InsertBatch creates a batch and its members; false when another scheduler
// created it first.
func (q *Schedule) InsertBatch(ctx context.Context, b NewBatch, now time.Time) (int64, bool, error) {
	var id int64
	err := q.tx.QueryRow(ctx, `INSERT INTO batches (runbook_id, runbook_name, batch_start_time, status, detected_at, init_dispatched_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (runbook_name, batch_start_time) DO NOTHING RETURNING id`,
		b.RunbookID, b.Name, b.Start, b.Status, now, b.InitAt).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	_, err = q.tx.Exec(ctx, `INSERT INTO batch_members (batch_id, member_key, status, added_at)
		SELECT $1, k, 'active', $3 FROM unnest($2::text[]) AS k`, id, b.Members, now)
	return id, true, err
}

// InsertPhase creates a phase execution of a version unless it exists.
func (q *Schedule) InsertPhase(ctx context.Context, batchID int64, ph Phase, due time.Time, version int, status string) error {
	_, err := q.tx.Exec(ctx, `INSERT INTO phase_executions (batch_id, phase_name, offset_minutes, due_at, runbook_version, status)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (batch_id, runbook_version, phase_name) DO NOTHING`,
		batchID, ph.Name, ph.OffsetMinutes, due, version, status)
	return err
}

// InsertInit creates a pending init execution unless it exists, and reports
// whether it did.
func (q *Schedule) InsertInit(ctx context.Context, batchID int64, version, index int, step Step, params []byte, now time.Time) (bool, error) {
	interval, timeout := pollSettings(step)
	tag, err := q.tx.Exec(ctx, `INSERT INTO init_executions (batch_id, step_name, step_index, runbook_version, worker_id, function_name,
		params_json, status, is_poll_step, poll_interval_sec, poll_timeout_sec, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11)
		ON CONFLICT (batch_id, runbook_version, step_index) DO NOTHING`,
		batchID, step.Name, index, version, step.WorkerID, step.Function, string(params), step.IsPollStep, interval, timeout, now)
	return tag.RowsAffected() == 1, err
}

// pollSettings are a step's poll_interval_sec and poll_timeout_sec: NULL
// unless it is a poll step.
func pollSettings(s Step) (interval, timeout *int) {
	if !s.IsPollStep {
		return nil, nil
	}
	i, t := s.PollIntervalSec, s.PollTimeoutSec
	return &i, &t
}

// LockLiveBatch locks a batch still governed by the version and in one of
// statuses, returning its start; false when another scheduler holds it or
// it moved on.
func (q *Schedule) LockLiveBatch(ctx context.Context, batchID, runbookID int64, statuses []string) (time.Time, bool, error) {
	var start time.Time
	err := q.tx.QueryRow(ctx, `SELECT batch_start_time FROM batches WHERE id = $1 AND runbook_id = $2 AND status = ANY($3)
		FOR NO KEY UPDATE SKIP LOCKED`, batchID, runbookID, statuses).Scan(&start)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return start.UTC(), err == nil, err
}

// NewMemberKeys are the current members of a batch's time with no active
// batch_members row (at most limit).
func (q *Schedule) NewMemberKeys(ctx context.Context, table string, batchID int64, start time.Time, limit int) ([]string, error) {
	return collect[string](q.tx.Query(ctx, withTable(`(`+currentKeys+` EXCEPT `+activeKeys+`) ORDER BY 1 LIMIT $3`, table), batchID, start, limit))
}

// GoneMemberKeys are the active members no longer current with the batch's
// time (gone from the source, or moved to another batch time; at most limit).
func (q *Schedule) GoneMemberKeys(ctx context.Context, table string, batchID int64, start time.Time, limit int) ([]string, error) {
	return collect[string](q.tx.Query(ctx, withTable(`(`+activeKeys+` EXCEPT `+currentKeys+`) ORDER BY 1 LIMIT $3`, table), batchID, start, limit))
}

// ChangedMember is a batch_members row a member event is about.
type ChangedMember struct {
	ID  int64
	Key string
	At  time.Time // add_dispatched_at or remove_dispatched_at
}

// AddMembers inserts new members or brings removed ones back; a member that
// is active already (another scheduler was first) is not returned.
func (q *Schedule) AddMembers(ctx context.Context, batchID int64, keys []string, now time.Time) ([]ChangedMember, error) {
	return changedMembers(q.tx.Query(ctx, `INSERT INTO batch_members (batch_id, member_key, status, added_at, add_dispatched_at)
		SELECT $1, k, 'active', $3, $3 FROM unnest($2::text[]) AS k
		ON CONFLICT (batch_id, member_key) DO UPDATE
		SET status = 'active', removed_at = NULL, add_dispatched_at = EXCLUDED.add_dispatched_at
		WHERE batch_members.status = 'removed'
		RETURNING id, member_key, add_dispatched_at`, batchID, keys, now))
}

// RemoveMembers marks members removed; a member another scheduler removed
// first is not returned.
func (q *Schedule) RemoveMembers(ctx context.Context, batchID int64, keys []string, now time.Time) ([]ChangedMember, error) {
	return changedMembers(q.tx.Query(ctx, `UPDATE batch_members SET status = 'removed', removed_at = $3, remove_dispatched_at = $3
		WHERE batch_id = $1 AND member_key = ANY($2) AND status = 'active'
		RETURNING id, member_key, remove_dispatched_at`, batchID, keys, now))
}

func changedMembers(rows pgx.Rows, err error) ([]ChangedMember, error) {
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChangedMember, error) {
		var c ChangedMember
		err := r.Scan(&c.ID, &c.Key, &c.At)
		c.At = c.At.UTC()
		return c, err
	})
	slices.SortFunc(out, func(a, b ChangedMember) int { return cmp.Compare(a.ID, b.ID) })
	return out, err
}

// BatchMember is a batch_members row.
type BatchMember struct {
	ID  int64
	Key string
}

// ActiveMembers are a batch's active members, by id.
func (q *Schedule) ActiveMembers(ctx context.Context, batchID int64) ([]BatchMember, error) {
	rows, err := q.tx.Query(ctx, `SELECT id, member_key FROM batch_members WHERE batch_id = $1 AND status = 'active' ORDER BY id`, batchID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BatchMember, error) {
		var m BatchMember
		return m, r.Scan(&m.ID, &m.Key)
	})
}

// DuePhase is a claimed phase execution.
type DuePhase struct {
	ID            int64
	Name          string
	OffsetMinutes int
	DueAt         time.Time
}

// ClaimPhases locks a batch's pending phases of a version due by now (at most
// limit), skipping those another scheduler holds.
func (q *Schedule) ClaimPhases(ctx context.Context, batchID int64, version int, now time.Time, limit int) ([]DuePhase, error) {
	rows, err := q.tx.Query(ctx, `SELECT id, phase_name, offset_minutes, due_at FROM phase_executions
		WHERE batch_id = $1 AND runbook_version = $2 AND status = 'pending' AND due_at <= $3
		ORDER BY due_at, id LIMIT $4 FOR UPDATE SKIP LOCKED`, batchID, version, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DuePhase, error) {
		var p DuePhase
		err := r.Scan(&p.ID, &p.Name, &p.OffsetMinutes, &p.DueAt)
		p.DueAt = p.DueAt.UTC()
		return p, err
	})
}

// MembersWithSteps are the members that have live steps of a phase already.
func (q *Schedule) MembersWithSteps(ctx context.Context, phaseID int64) ([]int64, error) {
	return collect[int64](q.tx.Query(ctx, `SELECT DISTINCT batch_member_id FROM step_executions
		WHERE phase_execution_id = $1 AND kind = 'phase' AND status <> 'cancelled'`, phaseID))
}

// PhaseStep is a step execution a phase dispatch creates.
type PhaseStep struct {
	PhaseID, MemberID int64
	Index             int
	Step              Step
	Params            []byte
	Status            string
	Message           *string
}

// InsertPhaseSteps creates step executions in one COPY.
func (q *Schedule) InsertPhaseSteps(ctx context.Context, steps []PhaseStep, now time.Time) error {
	rows := make([][]any, len(steps))
	for i, s := range steps {
		interval, timeout := pollSettings(s.Step)
		rows[i] = []any{s.PhaseID, s.MemberID, KindPhase, s.Step.Name, int32(s.Index), s.Step.WorkerID, s.Step.Function,
			string(s.Params), s.Status, s.Message, s.Step.IsPollStep, int32Ptr(interval), int32Ptr(timeout), s.Step.OnFailure, now}
	}
	_, err := q.tx.CopyFrom(ctx, pgx.Identifier{"step_executions"}, []string{"phase_execution_id", "batch_member_id", "kind",
		"step_name", "step_index", "worker_id", "function_name", "params_json", "status", "error_message", "is_poll_step",
		"poll_interval_sec", "poll_timeout_sec", "on_failure", "created_at"}, pgx.CopyFromRows(rows))
	return err
}

func int32Ptr(p *int) *int32 {
	if p == nil {
		return nil
	}
	v := int32(*p)
	return &v
}

// PhaseDispatched marks a pending phase dispatched; false when it was not pending.
func (q *Schedule) PhaseDispatched(ctx context.Context, phaseID int64, now time.Time) (bool, error) {
	tag, err := q.tx.Exec(ctx, `UPDATE phase_executions SET status = 'dispatched', dispatched_at = $2 WHERE id = $1 AND status = 'pending'`,
		phaseID, now)
	return tag.RowsAffected() == 1, err
}

// DuePoll is a polling execution whose poll interval passed, claimed for one poll-check.
type DuePoll struct {
	ID          int64
	StepName    string
	PollCount   int
	BatchID     int64
	RunbookName string
	Version     int
}

// ClaimPolls claims the executions of table (TableSteps or TableInit)
// polling whose interval has passed since last_polled_at and that got no
// poll-check for that last_polled_at yet (at most limit), by id. The claim
// stamps poll_checked_at: one poll-check per last_polled_at.
func (q *Schedule) ClaimPolls(ctx context.Context, table string, now time.Time, limit int) ([]DuePoll, error) {
	query := sqlClaimStepPolls
	if table == TableInit {
		query = sqlClaimInitPolls
	}
	rows, err := q.tx.Query(ctx, query, now, limit)
	if err != nil {
		return nil, err
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DuePoll, error) {
		var p DuePoll
		return p, r.Scan(&p.ID, &p.StepName, &p.PollCount, &p.BatchID, &p.RunbookName, &p.Version)
	})
	slices.SortFunc(due, func(a, b DuePoll) int { return cmp.Compare(a.ID, b.ID) })
	return due, err
}

// Transition is a batch locked to move to another version.
type Transition struct {
	Start       time.Time
	Status      string
	FromVersion int
}

// LockTransition locks a batch of statuses that another version than
// runbookID governs; false when it moved already or another scheduler holds it.
func (q *Schedule) LockTransition(ctx context.Context, batchID, runbookID int64, statuses []string) (Transition, bool, error) {
	var t Transition
	err := q.tx.QueryRow(ctx, `SELECT b.batch_start_time, b.status, r.version FROM batches b JOIN runbooks r ON r.id = b.runbook_id
		WHERE b.id = $1 AND b.runbook_id <> $2 AND b.status = ANY($3) FOR NO KEY UPDATE OF b SKIP LOCKED`,
		batchID, runbookID, statuses).Scan(&t.Start, &t.Status, &t.FromVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, nil
	}
	t.Start = t.Start.UTC()
	return t, err == nil, err
}

// MoveBatch makes a version govern a batch and skips the pending phases of
// other versions, returning how many it skipped.
func (q *Schedule) MoveBatch(ctx context.Context, batchID, runbookID int64, version int) (int64, error) {
	if _, err := q.tx.Exec(ctx, `UPDATE batches SET runbook_id = $2 WHERE id = $1`, batchID, runbookID); err != nil {
		return 0, err
	}
	tag, err := q.tx.Exec(ctx, `UPDATE phase_executions SET status = 'skipped'
		WHERE batch_id = $1 AND runbook_version <> $2 AND status = 'pending'`, batchID, version)
	return tag.RowsAffected(), err
}

// PhaseStatuses are the statuses of a batch's phase executions of a version, by phase name.
func (q *Schedule) PhaseStatuses(ctx context.Context, batchID int64, version int) (map[string]string, error) {
	rows, err := q.tx.Query(ctx, `SELECT phase_name, status FROM phase_executions WHERE batch_id = $1 AND runbook_version = $2`,
		batchID, version)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var name, status string
	_, err = pgx.ForEachRow(rows, []any{&name, &status}, func() error {
		out[name] = status
		return nil
	})
	return out, err
}

// RevivePhase makes a phase a transition skipped pending again.
func (q *Schedule) RevivePhase(ctx context.Context, batchID int64, version int, phase string) error {
	_, err := q.tx.Exec(ctx, `UPDATE phase_executions SET status = 'pending'
		WHERE batch_id = $1 AND runbook_version = $2 AND phase_name = $3 AND status = 'skipped'`, batchID, version, phase)
	return err
}

// InitDispatched puts a batch back in init_dispatched.
func (q *Schedule) InitDispatched(ctx context.Context, batchID int64, now time.Time) error {
	_, err := q.tx.Exec(ctx, `UPDATE batches SET status = 'init_dispatched', init_dispatched_at = $2 WHERE id = $1`, batchID, now)
	return err
}

// Reads outside a transaction: most ticks find nothing to do.

// KnownBatchTimes are the batch start times among times a runbook has batches for.
func (s *Store) KnownBatchTimes(ctx context.Context, name string, times []time.Time) ([]time.Time, error) {
	return collect[time.Time](s.pool.Query(ctx, `SELECT batch_start_time FROM batches WHERE runbook_name = $1 AND batch_start_time = ANY($2)`,
		name, times))
}

// LiveBatch is a batch whose members are followed.
type LiveBatch struct {
	ID    int64
	Start time.Time
}

// LiveBatches are a version's batches in one of statuses, by id.
func (s *Store) LiveBatches(ctx context.Context, runbookID int64, statuses []string) ([]LiveBatch, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, batch_start_time FROM batches WHERE runbook_id = $1 AND status = ANY($2) ORDER BY id`,
		runbookID, statuses)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LiveBatch, error) {
		var b LiveBatch
		return b, r.Scan(&b.ID, &b.Start)
	})
}

// MembersDiffer reports whether a batch's current members (of its time, in
// table) and its active batch_members differ.
func (s *Store) MembersDiffer(ctx context.Context, table string, batchID int64, start time.Time) (bool, error) {
	var differ bool
	err := s.pool.QueryRow(ctx, withTable(`SELECT EXISTS (`+currentKeys+` EXCEPT `+activeKeys+`)
		OR EXISTS (`+activeKeys+` EXCEPT `+currentKeys+`)`, table), batchID, start).Scan(&differ)
	return differ, err
}

// DueBatches are the active batches of a version with a pending phase due by now (at most limit).
func (s *Store) DueBatches(ctx context.Context, now time.Time, runbookID int64, version, limit int) ([]int64, error) {
	return collect[int64](s.pool.Query(ctx, `SELECT DISTINCT pe.batch_id FROM phase_executions pe JOIN batches b ON b.id = pe.batch_id
		WHERE pe.status = 'pending' AND pe.due_at <= $1 AND pe.runbook_version = $3
		AND b.runbook_id = $2 AND b.status = 'active' ORDER BY 1 LIMIT $4`, now, runbookID, version, limit))
}

// TransitionCandidates are a runbook's batches in one of statuses that
// another version than runbookID governs (at most limit).
func (s *Store) TransitionCandidates(ctx context.Context, name string, runbookID int64, statuses []string, limit int) ([]int64, error) {
	return collect[int64](s.pool.Query(ctx, `SELECT id FROM batches
		WHERE runbook_name = $1 AND runbook_id <> $2 AND status = ANY($3) ORDER BY id LIMIT $4`, name, runbookID, statuses, limit))
}

// HasMemberData reports whether a member table has any row, current or not:
// whether member data was ever loaded for the version.
func (s *Store) HasMemberData(ctx context.Context, table string) (bool, error) {
	var loaded bool
	err := s.pool.QueryRow(ctx, withTable(`SELECT EXISTS (SELECT 1 FROM @T)`, table)).Scan(&loaded)
	return loaded, err
}

// MarkIgnoreApplied records that an ignore version's overdue phases were
// dealt with, once no batch of its name in one of statuses is governed by
// another version; false when that is not so yet (or recorded before).
func (s *Store) MarkIgnoreApplied(ctx context.Context, runbookID int64, name string, statuses []string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE runbooks SET ignore_overdue_applied = true
		WHERE id = $1 AND is_active AND overdue_behavior = 'ignore' AND NOT ignore_overdue_applied
		AND NOT EXISTS (SELECT 1 FROM batches WHERE runbook_name = $2 AND runbook_id <> $1 AND status = ANY($3))`,
		runbookID, name, statuses)
	return tag.RowsAffected() == 1, err
}

// collect reads a one-column result.
func collect[T any](rows pgx.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[T])
}

// Queries over a version's member table. The table name comes from a stored
// version (validated by this package) and is quoted here as well. The member
// diffs are EXCEPT set operations: hashed or sorted whatever the planner
// believes about table sizes. (An anti-join on fresh, unanalyzed tables was
// planned as a nested loop: seconds for a 10k-member batch.) currentKeys and
// activeKeys are the two sides of a batch's member diff: the current members
// of its time ($2) and its active batch_members ($1).
const (
	currentKeys = `SELECT _member_key FROM @T WHERE _batch_time = $2 AND _is_current`
	activeKeys  = `SELECT member_key FROM batch_members WHERE batch_id = $1 AND status = 'active'`
)

func withTable(query, table string) string {
	return strings.ReplaceAll(query, "@T", quote(table))
}

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
