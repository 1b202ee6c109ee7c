package runbook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Member is one row of a version's member data.
type Member struct {
	// Key identifies the member (the data source's primary key).
	Key string
	// BatchTime is the start time of the member's batch.
	BatchTime time.Time
	// Values maps data columns to values. A column without a value (NULL)
	// is absent; templates using it then fail to render.
	Values map[string]string
}

// LoadResult counts what a load did. Updated includes members that were no
// longer current and came back.
type LoadResult struct {
	Inserted, Updated, Unchanged, Removed int
}

// MaxMemberKey bounds a member key, in characters (seed 003: NVARCHAR(256)).
const MaxMemberKey = 256

// maxReported bounds the problems one validation error lists.
const maxReported = 20

// systemColumns are the member table's columns before the data columns.
var systemColumns = []struct{ name, def, typ string }{
	{"_row_id", "bigserial PRIMARY KEY", "bigint"},
	{"_member_key", "text NOT NULL UNIQUE", "text"},
	{"_batch_time", "timestamptz NOT NULL", "timestamp with time zone"},
	{"_first_seen_at", "timestamptz NOT NULL DEFAULT now()", "timestamp with time zone"},
	{"_last_seen_at", "timestamptz NOT NULL DEFAULT now()", "timestamp with time zone"},
	{"_is_current", "boolean NOT NULL DEFAULT true", "boolean"},
}

// createDataTable creates a version's member table unless it exists, and
// checks that what exists has exactly the expected columns. Every name is
// validated and quoted.
func createDataTable(ctx context.Context, tx pgx.Tx, table string, columns []string) error {
	if err := checkDataTable(table); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (", quote(table))
	for i, c := range systemColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", c.name, c.def)
	}
	for _, c := range columns {
		if err := CheckColumn(c); err != nil {
			return err
		}
		fmt.Fprintf(&b, ", %s text", quote(c))
	}
	// Every load rewrites its members (_last_seen_at): free room in each page
	// lets those updates stay on the page without touching the indexes (HOT),
	// which halves the time of a 10k-member reload.
	b.WriteString(") WITH (fillfactor = 70)")
	if _, err := tx.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("create member table %s: %w", table, err)
	}
	rows, err := tx.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, quote(table))
	if err != nil {
		return err
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name, typ string
		err := r.Scan(&name, &typ)
		return name + " " + typ, err
	})
	if err != nil {
		return err
	}
	want := make([]string, 0, len(systemColumns)+len(columns))
	for _, c := range systemColumns {
		want = append(want, c.name+" "+c.typ)
	}
	for _, c := range columns {
		want = append(want, c+" text")
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("member table %s exists with columns (%s), want (%s)", table, strings.Join(got, ", "), strings.Join(want, ", "))
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (_batch_time) WHERE _is_current`,
		quote(indexName(table)), quote(table))); err != nil {
		return fmt.Errorf("index member table %s: %w", table, err)
	}
	return nil
}

// LoadMembers upserts members into a version's table (version 0: the active
// one): _last_seen_at = now, _is_current = true. With replace, the members
// missing from rows get _is_current = false (the data source no longer
// returns them). Rows with unknown columns, a blank or repeated key, or a
// zero batch time are refused with ErrInvalidMembers, each problem naming
// the row's index in rows and the field; nothing is written then. Loads of
// one table take turns; readers are not blocked.
func (s *Store) LoadMembers(ctx context.Context, name string, version int, rows []Member, replace bool) (LoadResult, error) {
	var res LoadResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		table, columns, err := memberTable(ctx, tx, name, version)
		if err != nil {
			return err
		}
		if err := CheckMembers(rows, columns); err != nil {
			return err
		}
		if err := checkDataTable(table); err != nil {
			return err
		}
		qt := quote(table)
		if _, err := tx.Exec(ctx, `LOCK TABLE `+qt+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		res, err = load(ctx, tx, qt, columns, rows, replace)
		return err
	})
	if err != nil {
		return LoadResult{}, fmt.Errorf("load members of %s v%d: %w", name, version, err)
	}
	return res, nil
}

func memberTable(ctx context.Context, tx pgx.Tx, name string, version int) (string, []string, error) {
	var table string
	var columns []string
	var err error
	if version == 0 {
		err = tx.QueryRow(ctx, `SELECT data_table_name, columns FROM runbooks WHERE name = $1 AND is_active`, name).Scan(&table, &columns)
	} else {
		err = tx.QueryRow(ctx, `SELECT data_table_name, columns FROM runbooks WHERE name = $1 AND version = $2`, name, version).Scan(&table, &columns)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, ErrNotFound
	}
	return table, columns, err
}

// load copies rows into a temporary table, updates the stored members
// (counting which changed), inserts the new ones and, with replace, retires
// the members the rows lack. A few set-based statements, whatever the size.
func load(ctx context.Context, tx pgx.Tx, table string, columns []string, rows []Member, replace bool) (LoadResult, error) {
	var res LoadResult
	quoted := make([]string, len(columns))
	for i, c := range columns {
		quoted[i] = quote(c)
	}
	var def strings.Builder
	def.WriteString(`CREATE TEMP TABLE runbook_load (_member_key text NOT NULL, _batch_time timestamptz NOT NULL`)
	for _, c := range quoted {
		def.WriteString(", " + c + " text")
	}
	def.WriteString(`) ON COMMIT DROP`)
	if _, err := tx.Exec(ctx, def.String()); err != nil {
		return res, err
	}
	copyColumns := append([]string{"_member_key", "_batch_time"}, columns...)
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"runbook_load"}, copyColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		m := rows[i]
		vals := make([]any, 0, len(copyColumns))
		vals = append(vals, m.Key, m.BatchTime)
		for _, c := range columns {
			if v, ok := m.Values[c]; ok {
				vals = append(vals, v)
			} else {
				vals = append(vals, nil)
			}
		}
		return vals, nil
	}))
	if err != nil {
		return res, fmt.Errorf("copy: %w", err)
	}
	if int(n) != len(rows) {
		return res, fmt.Errorf("copy: wrote %d rows of %d", n, len(rows))
	}
	var changed, sets []string
	for _, c := range append([]string{"_batch_time"}, quoted...) {
		changed = append(changed, "old."+c+" IS DISTINCT FROM l."+c)
		sets = append(sets, c+" = l."+c)
	}
	// The table is locked against other loads: no member appears between the
	// update and the insert. old is the row as it was before the update.
	if err := tx.QueryRow(ctx, `WITH updated AS (
			UPDATE `+table+` t SET `+strings.Join(sets, ", ")+`, _last_seen_at = now(), _is_current = true
			FROM runbook_load l JOIN `+table+` old ON old._member_key = l._member_key
			WHERE t._member_key = l._member_key
			RETURNING NOT old._is_current OR `+strings.Join(changed, " OR ")+` AS changed)
		SELECT count(*) FILTER (WHERE changed), count(*) FILTER (WHERE NOT changed) FROM updated`).Scan(&res.Updated, &res.Unchanged); err != nil {
		return res, fmt.Errorf("update: %w", err)
	}
	cols := "_member_key, " + strings.Join(append([]string{"_batch_time"}, quoted...), ", ")
	tag, err := tx.Exec(ctx, `INSERT INTO `+table+` (`+cols+`) SELECT `+cols+` FROM runbook_load l
		WHERE NOT EXISTS (SELECT 1 FROM `+table+` t WHERE t._member_key = l._member_key)`)
	if err != nil {
		return res, fmt.Errorf("insert: %w", err)
	}
	res.Inserted = int(tag.RowsAffected())
	if replace {
		tag, err := tx.Exec(ctx, `UPDATE `+table+` t SET _is_current = false WHERE t._is_current
			AND NOT EXISTS (SELECT 1 FROM runbook_load l WHERE l._member_key = t._member_key)`)
		if err != nil {
			return res, fmt.Errorf("retire missing members: %w", err)
		}
		res.Removed = int(tag.RowsAffected())
	}
	return res, nil
}

// CheckMembers validates member rows against a version's columns: a key
// that is not blank, at most MaxMemberKey characters and unique in rows, a
// batch time, known columns, and text PostgreSQL can store (UTF-8, no NUL).
// Problems name the row's index in rows; the error wraps ErrInvalidMembers.
func CheckMembers(rows []Member, columns []string) error {
	known := make(map[string]bool, len(columns))
	for _, c := range columns {
		known[c] = true
	}
	var problems []string
	seen := make(map[string]int, len(rows))
	for i, m := range rows {
		if len(problems) > maxReported {
			break
		}
		for _, p := range checkMember(m, known, columns) {
			problems = append(problems, fmt.Sprintf("row %d: %s", i, p))
		}
		if first, dup := seen[m.Key]; dup {
			problems = append(problems, fmt.Sprintf("row %d: member_key %q repeats row %d", i, m.Key, first))
		} else {
			seen[m.Key] = i
		}
	}
	return membersError(problems)
}

func membersError(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	if len(problems) > maxReported {
		problems = append(problems[:maxReported], "… and more")
	}
	return fmt.Errorf("%w:\n%s", ErrInvalidMembers, strings.Join(problems, "\n"))
}

// checkMember lists the problems of one member, in field order.
func checkMember(m Member, known map[string]bool, columns []string) []string {
	var out []string
	switch {
	case strings.TrimSpace(m.Key) == "":
		out = append(out, "member_key is blank")
	case !validText(m.Key):
		out = append(out, "member_key must be UTF-8 text without NUL characters")
	case utf8.RuneCountInString(m.Key) > MaxMemberKey:
		out = append(out, fmt.Sprintf("member_key is longer than %d characters", MaxMemberKey))
	}
	if problem := batchTimeProblem(m.BatchTime); problem != "" {
		out = append(out, problem)
	}
	for _, col := range slices.Sorted(maps.Keys(m.Values)) {
		switch {
		case !known[col]:
			out = append(out, fmt.Sprintf("unknown column %q (columns: %s)", col, listOrNone(columns)))
		case !validText(m.Values[col]):
			out = append(out, fmt.Sprintf("column %s must be UTF-8 text without NUL characters", col))
		}
	}
	return out
}

// batchTimeProblem: a batch time must be set and, in UTC, within the years
// 1 to 9999 (RFC 3339's range).
func batchTimeProblem(t time.Time) string {
	switch u := t.UTC(); {
	case t.IsZero():
		return "batch_time is missing"
	case u.Year() < 1 || u.Year() > 9999:
		return fmt.Sprintf("batch_time %s is out of range (years 1 to 9999 UTC)", u.Format(time.RFC3339))
	}
	return ""
}

// CurrentMembers returns the current members of a batch (by key) from a
// member table (StoredRunbook.DataTable), on q: the pool when nil, or the
// caller's transaction.
func (s *Store) CurrentMembers(ctx context.Context, q Querier, table string, batchTime time.Time) ([]Member, error) {
	if err := checkDataTable(table); err != nil {
		return nil, err
	}
	rows, err := s.querier(q).Query(ctx, `SELECT * FROM `+quote(table)+
		` WHERE _batch_time = $1 AND _is_current ORDER BY _member_key`, batchTime)
	if err != nil {
		return nil, fmt.Errorf("members of %s at %s: %w", table, FormatTime(batchTime), err)
	}
	members, err := scanMembers(rows)
	if err != nil {
		return nil, fmt.Errorf("members of %s at %s: %w", table, FormatTime(batchTime), err)
	}
	return members, nil
}

// Member returns a current member by key; ErrNotFound when there is no
// current member with that key.
func (s *Store) Member(ctx context.Context, q Querier, table, key string) (Member, error) {
	return s.member(ctx, q, table, key, ` AND _is_current`)
}

// LastKnownMember reads a member's data whether or not the data source still
// returns it: what on_member_removed steps resolve against.
func (s *Store) LastKnownMember(ctx context.Context, q Querier, table, key string) (Member, error) {
	return s.member(ctx, q, table, key, "")
}

func (s *Store) member(ctx context.Context, q Querier, table, key, filter string) (Member, error) {
	if err := checkDataTable(table); err != nil {
		return Member{}, err
	}
	rows, err := s.querier(q).Query(ctx, `SELECT * FROM `+quote(table)+` WHERE _member_key = $1`+filter, key)
	if err != nil {
		return Member{}, fmt.Errorf("member %q of %s: %w", key, table, err)
	}
	members, err := scanMembers(rows)
	if err != nil {
		return Member{}, fmt.Errorf("member %q of %s: %w", key, table, err)
	}
	if len(members) == 0 {
		return Member{}, fmt.Errorf("member %q of %s: %w", key, table, ErrNotFound)
	}
	return members[0], nil
}

// CurrentBatchTimes lists the distinct batch times of a member table's
// current members, in order: the batches the data source describes.
func (s *Store) CurrentBatchTimes(ctx context.Context, q Querier, table string) ([]time.Time, error) {
	if err := checkDataTable(table); err != nil {
		return nil, err
	}
	rows, err := s.querier(q).Query(ctx, `SELECT DISTINCT _batch_time FROM `+quote(table)+` WHERE _is_current ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("batch times of %s: %w", table, err)
	}
	times, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (time.Time, error) {
		var t time.Time
		err := r.Scan(&t)
		return t.UTC(), err
	})
	if err != nil {
		return nil, fmt.Errorf("batch times of %s: %w", table, err)
	}
	return times, nil
}

func (s *Store) querier(q Querier) Querier {
	if q == nil {
		return s.pool
	}
	return q
}

// scanMembers reads SELECT * rows of a member table: the system columns by
// name, every other column as data.
func scanMembers(rows pgx.Rows) ([]Member, error) {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var out []Member
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		m := Member{Values: map[string]string{}}
		for i, fd := range fields {
			switch v := vals[i].(type) {
			case nil:
			case string:
				switch {
				case fd.Name == "_member_key":
					m.Key = v
				case !strings.HasPrefix(fd.Name, "_"):
					m.Values[fd.Name] = v
				}
			case time.Time:
				if fd.Name == "_batch_time" {
					m.BatchTime = v.UTC()
				}
			}
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
