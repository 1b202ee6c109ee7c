package runbook

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, Migrations) }

type fixture struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *Store
}

func setup(t testing.TB) fixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	return fixture{ctx: context.Background(), pool: pool, store: NewStore(pool)}
}

func mustParse(t testing.TB, src string) *Runbook {
	t.Helper()
	rb, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return rb
}

// contosoVersion is the spec example as another version (and description).
func contosoVersion(t testing.TB, version int, description string) *Runbook {
	t.Helper()
	src := strings.Replace(string(readContoso(t)), "version: 3", fmt.Sprintf("version: %d", version), 1)
	src = strings.Replace(src, "Move mailboxes to Exchange Online.", description, 1)
	return mustParse(t, src)
}

func (f fixture) apply(t testing.TB, rb *Runbook) *StoredRunbook {
	t.Helper()
	sr, _, err := f.store.Apply(f.ctx, rb, "test")
	if err != nil {
		t.Fatal(err)
	}
	return sr
}

func (f fixture) activeVersions(t testing.TB, name string) []int {
	t.Helper()
	rows, _ := f.pool.Query(f.ctx, `SELECT version FROM runbooks WHERE name = $1 AND is_active ORDER BY version`, name)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestApplyIsIdempotentAndVersionsAreImmutable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	v3 := contosoVersion(t, 3, "Move mailboxes.")
	first, created, err := f.store.Apply(f.ctx, v3, "test")
	if err != nil || !created {
		t.Fatalf("first apply: created %v, %v", created, err)
	}
	if !first.Active || first.DataTable != "runbook_contoso_mailbox_migration_v3" || first.ContentHash != ContentHash(v3.Source) ||
		first.ActivatedAt.IsZero() || first.Runbook.Name != v3.Name || len(first.Runbook.Phases) != 2 {
		t.Fatalf("stored %+v", first)
	}
	again, created, err := f.store.Apply(f.ctx, contosoVersion(t, 3, "Move mailboxes."), "test")
	if err != nil || created || again.ID != first.ID || !again.ActivatedAt.Equal(first.ActivatedAt) {
		t.Fatalf("same content again: %+v created %v, %v", again, created, err)
	}
	if _, _, err := f.store.Apply(f.ctx, contosoVersion(t, 3, "Changed."), "test"); !errors.Is(err, ErrVersionExists) {
		t.Fatalf("other content under v3: %v", err)
	}
	v4 := f.apply(t, contosoVersion(t, 4, "Move mailboxes, take two."))
	if got := f.activeVersions(t, v3.Name); !reflect.DeepEqual(got, []int{4}) {
		t.Fatalf("active versions %v, want [4]", got)
	}
	active, err := f.store.Get(f.ctx, v3.Name, 0)
	if err != nil || active.ID != v4.ID || active.Runbook.Description != "Move mailboxes, take two." {
		t.Fatalf("Get(active) = %+v, %v", active, err)
	}
	old, err := f.store.Get(f.ctx, v3.Name, 3)
	if err != nil || old.Active || old.Runbook.Version != 3 {
		t.Fatalf("Get(v3) = %+v, %v", old, err)
	}
	if byID, err := f.store.GetByID(f.ctx, old.ID); err != nil || byID.Runbook.Version != 3 {
		t.Fatalf("GetByID = %+v, %v", byID, err)
	}
	for _, get := range []func() error{
		func() error { _, err := f.store.Get(f.ctx, v3.Name, 9); return err },
		func() error { _, err := f.store.Get(f.ctx, "nothing", 0); return err },
		func() error { _, err := f.store.GetByID(f.ctx, 999); return err },
	} {
		if err := get(); !errors.Is(err, ErrNotFound) {
			t.Errorf("missing version: %v, want ErrNotFound", err)
		}
	}
	other := f.apply(t, mustParse(t, "name: another\nversion: 1\ndata_source: {columns: [email]}\n"+phase))
	list, err := f.store.List(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, sr := range list {
		order = append(order, fmt.Sprintf("%s v%d", sr.Runbook.Name, sr.Runbook.Version))
	}
	if want := []string{"another v1", "contoso-mailbox-migration v4", "contoso-mailbox-migration v3"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("List order %v, want %v", order, want)
	}
	actives, err := f.store.Active(f.ctx)
	if err != nil || len(actives) != 2 || actives[0].ID != other.ID || actives[1].ID != v4.ID {
		t.Fatalf("Active = %+v, %v", actives, err)
	}
	if ids, err := f.store.ActiveIDs(f.ctx); err != nil || !reflect.DeepEqual(ids, []int64{other.ID, v4.ID}) {
		t.Fatalf("ActiveIDs = %v, %v, want [%d %d]", ids, err, other.ID, v4.ID)
	}
	// Applying a stored version again makes it the active one (a rollback).
	back, created, err := f.store.Apply(f.ctx, contosoVersion(t, 3, "Move mailboxes."), "test")
	if err != nil || created || !back.Active || back.ID != first.ID {
		t.Fatalf("re-activating v3: %+v created %v, %v", back, created, err)
	}
	if got := f.activeVersions(t, v3.Name); !reflect.DeepEqual(got, []int{3}) {
		t.Fatalf("active versions %v, want [3]", got)
	}
}

func TestApplyRefusesARunbookThatDoesNotMatchItsSource(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rb := contosoVersion(t, 3, "x")
	rb.Columns = append(rb.Columns, "password")
	if _, _, err := f.store.Apply(f.ctx, rb, "test"); err == nil || !strings.Contains(err.Error(), "does not match its source") {
		t.Fatalf("apply of an edited runbook: %v", err)
	}
	if _, _, err := f.store.Apply(f.ctx, &Runbook{Name: "r", Version: 1}, "test"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("apply without a source: %v", err)
	}
}

func TestApplyKeepsOneActiveVersionUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for v := 1; v <= 8; v++ {
		wg.Go(func() {
			_, _, err := f.store.Apply(f.ctx, contosoVersion(t, v, "concurrent"), "test")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.activeVersions(t, "contoso-mailbox-migration"); len(got) != 1 {
		t.Fatalf("active versions %v, want exactly one", got)
	}
}

func TestApplyCreatesTheMemberTable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Reserved words as columns work because every identifier is quoted.
	sr := f.apply(t, mustParse(t, "name: odd-columns\nversion: 2\ndata_source: {columns: [select, user, email]}\n"+
		"phases:\n  - name: p\n    offset_minutes: 0\n    steps: [{name: s, worker_id: w, function: f, params: {u: \"{{ user }}\"}}]\n"))
	rows, _ := f.pool.Query(f.ctx, `SELECT column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns
		WHERE table_name = $1 ORDER BY ordinal_position`, sr.DataTable)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"_row_id bigint NO", "_member_key text NO", "_batch_time timestamp with time zone NO",
		"_first_seen_at timestamp with time zone NO", "_last_seen_at timestamp with time zone NO", "_is_current boolean NO",
		"select text YES", "user text YES", "email text YES"}
	if !reflect.DeepEqual(cols, want) {
		t.Fatalf("columns of %s:\n%v\nwant\n%v", sr.DataTable, cols, want)
	}
	var indexes int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, sr.DataTable).Scan(&indexes); err != nil || indexes != 3 {
		t.Fatalf("%d indexes (primary key, unique key, batch time), %v", indexes, err)
	}
	res, err := f.store.LoadMembers(f.ctx, "odd-columns", 2, []Member{{Key: "k", BatchTime: time.Now(),
		Values: map[string]string{"select": "s", "user": "u"}}}, false)
	if err != nil || res.Inserted != 1 {
		t.Fatalf("load into reserved-word columns: %+v, %v", res, err)
	}
}

func TestApplyRefusesAForeignTableOfTheSameName(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, `CREATE TABLE runbook_r_v1 (_row_id bigserial PRIMARY KEY, secret text)`); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.store.Apply(f.ctx, mustParse(t, head+phase), "test")
	if err == nil || !strings.Contains(err.Error(), "member table runbook_r_v1 exists with columns (_row_id bigint, secret text)") {
		t.Fatalf("apply over a foreign table: %v", err)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM runbooks`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d runbooks stored after a failed apply, %v", n, err)
	}
}

var batch1 = time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)
var batch2 = time.Date(2025, 3, 22, 0, 0, 0, 0, time.UTC)

func member(key string, at time.Time, email string) Member {
	return Member{Key: key, BatchTime: at, Values: map[string]string{"email": email}}
}

type memberRow struct {
	Key, Email string
	Current    bool
	FirstSeen  time.Time
}

func (f fixture) memberRows(t testing.TB, table string) map[string]memberRow {
	t.Helper()
	rows, _ := f.pool.Query(f.ctx, `SELECT _member_key, coalesce(email, '<null>'), _is_current, _first_seen_at FROM `+quote(table))
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[memberRow])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]memberRow{}
	for _, r := range got {
		out[r.Key] = r
	}
	return out
}

func TestLoadMembersCountsAndReplaces(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sr := f.apply(t, mustParse(t, head+phase))
	load := func(rows []Member, replace bool) LoadResult {
		t.Helper()
		res, err := f.store.LoadMembers(f.ctx, "r", 1, rows, replace)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	all := []Member{member("a", batch1, "a@x"), member("b", batch1, "b@x"), member("c", batch2, "c@x")}
	if res := load(all, false); res != (LoadResult{Inserted: 3}) {
		t.Fatalf("first load %+v", res)
	}
	before := f.memberRows(t, sr.DataTable)
	if res := load(all, true); res != (LoadResult{Unchanged: 3}) {
		t.Fatalf("same rows again %+v", res)
	}
	// b changes its email, c moves batch, a disappears, d is new.
	next := []Member{member("b", batch1, "b@y"), member("c", batch1, "c@x"), member("d", batch2, "d@x")}
	if res := load(next, true); res != (LoadResult{Inserted: 1, Updated: 2, Removed: 1}) {
		t.Fatalf("replace load %+v", res)
	}
	after := f.memberRows(t, sr.DataTable)
	if after["a"].Current || !after["b"].Current || after["b"].Email != "b@y" || !after["d"].Current {
		t.Fatalf("rows after replace %+v", after)
	}
	if !after["b"].FirstSeen.Equal(before["b"].FirstSeen) {
		t.Fatalf("_first_seen_at moved on update: %v → %v", before["b"].FirstSeen, after["b"].FirstSeen)
	}
	// Without replace, missing members stay; a returning member counts as updated.
	if res := load([]Member{member("a", batch1, "a@x")}, false); res != (LoadResult{Updated: 1}) {
		t.Fatalf("returning member %+v", res)
	}
	// A column missing from Values is NULL, a change from "b@y".
	if res := load([]Member{{Key: "b", BatchTime: batch1}}, false); res != (LoadResult{Updated: 1}) {
		t.Fatalf("value removed %+v", res)
	}
	if got := f.memberRows(t, sr.DataTable)["b"].Email; got != "<null>" {
		t.Fatalf("b's email = %q, want NULL", got)
	}
	if res := load(nil, true); res != (LoadResult{Removed: 4}) {
		t.Fatalf("an empty replace retires everyone: %+v", res)
	}
	// Version 0 loads into the active version.
	if res, err := f.store.LoadMembers(f.ctx, "r", 0, all, false); err != nil || res != (LoadResult{Updated: 3}) {
		t.Fatalf("load into the active version: %+v, %v", res, err)
	}
}

func TestLoadMembersRejectsInvalidRowsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sr := f.apply(t, mustParse(t, head+phase))
	rows := []Member{
		member("ok", batch1, "ok@x"),
		{Key: "bad", BatchTime: batch1, Values: map[string]string{"email": "x", "password": "hunter2"}},
		{Key: "  ", BatchTime: batch1},
		{Key: "late"},
		member("ok", batch1, "again"),
		{Key: "nul", BatchTime: batch1, Values: map[string]string{"email": "a\x00b"}},
		{Key: strings.Repeat("k", 257), BatchTime: batch1},
	}
	_, err := f.store.LoadMembers(f.ctx, "r", 1, rows, true)
	if !errors.Is(err, ErrInvalidMembers) {
		t.Fatalf("error %v, want ErrInvalidMembers", err)
	}
	for _, want := range []string{
		`row 1: unknown column "password" (columns: email)`,
		"row 2: member_key is blank",
		"row 3: batch_time is missing",
		`row 4: member_key "ok" repeats row 0`,
		"row 5: column email must be UTF-8 text without NUL characters",
		"row 6: member_key is longer than 256 characters",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got := f.memberRows(t, sr.DataTable); len(got) != 0 {
		t.Fatalf("rows written despite the error: %+v", got)
	}
	if _, err := f.store.LoadMembers(f.ctx, "r", 7, nil, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown version: %v", err)
	}
}

func TestConcurrentLoadsTakeTurns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sr := f.apply(t, mustParse(t, head+phase))
	var wg sync.WaitGroup
	results := make([]LoadResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			// Both loads carry the shared members; each adds its own 500.
			var rows []Member
			for j := range 500 {
				rows = append(rows, member(fmt.Sprintf("shared-%d", j), batch1, "s"))
				rows = append(rows, member(fmt.Sprintf("own-%d-%d", i, j), batch1, "o"))
			}
			results[i], errs[i] = f.store.LoadMembers(f.ctx, "r", 1, rows, false)
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	sum := LoadResult{}
	for _, r := range results {
		sum.Inserted += r.Inserted
		sum.Unchanged += r.Unchanged
		sum.Updated += r.Updated
	}
	// Whichever went first inserted the shared members; the other found them unchanged.
	if sum != (LoadResult{Inserted: 1500, Unchanged: 500}) {
		t.Fatalf("results %+v, sum %+v", results, sum)
	}
	if got := f.memberRows(t, sr.DataTable); len(got) != 1500 {
		t.Fatalf("%d members, want 1500", len(got))
	}
}

func TestCurrentMembersAndMember(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sr := f.apply(t, mustParse(t, "name: r\nversion: 1\ndata_source: {columns: [email, site]}\n"+phase))
	rows := []Member{
		{Key: "b", BatchTime: batch1, Values: map[string]string{"email": "b@x", "site": ""}},
		{Key: "a", BatchTime: batch1, Values: map[string]string{"email": "a@x"}},
		{Key: "c", BatchTime: batch2, Values: map[string]string{"email": "c@x", "site": "s"}},
		{Key: "gone", BatchTime: batch1, Values: map[string]string{"email": "g@x"}},
	}
	if _, err := f.store.LoadMembers(f.ctx, "r", 1, rows, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.LoadMembers(f.ctx, "r", 1, rows[:3], true); err != nil {
		t.Fatal(err)
	}
	got, err := f.store.CurrentMembers(f.ctx, nil, sr.DataTable, batch1.In(time.FixedZone("CET", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{Key: "a", BatchTime: batch1, Values: map[string]string{"email": "a@x"}}, // site NULL: absent
		{Key: "b", BatchTime: batch1, Values: map[string]string{"email": "b@x", "site": ""}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CurrentMembers = %+v\nwant %+v", got, want)
	}
	// In the caller's transaction, as the scheduler and executor read.
	err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		m, err := f.store.Member(f.ctx, tx, sr.DataTable, "c")
		if err != nil || !reflect.DeepEqual(m, rows[2]) {
			return fmt.Errorf("Member(c) = %+v, %v", m, err)
		}
		if _, err := f.store.Member(f.ctx, tx, sr.DataTable, "gone"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("a member no longer current: %v, want ErrNotFound", err)
		}
		times, err := f.store.CurrentBatchTimes(f.ctx, tx, sr.DataTable)
		if err != nil || !reflect.DeepEqual(times, []time.Time{batch1, batch2}) {
			return fmt.Errorf("CurrentBatchTimes = %v, %v", times, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	vars := MemberVars(want[0], 9, batch1)
	if _, err := sr.Runbook.Phases[0].Steps[0].Params.Render(vars); err != nil {
		t.Fatalf("a loaded member renders: %v", err)
	}
	for _, bad := range []string{"jobs", `runbook_r_v1"; DROP TABLE runbooks; --`} {
		if _, err := f.store.CurrentMembers(f.ctx, nil, bad, batch1); err == nil {
			t.Errorf("CurrentMembers accepted table %q", bad)
		}
		if _, err := f.store.Member(f.ctx, nil, bad, "a"); err == nil {
			t.Errorf("Member accepted table %q", bad)
		}
	}
}

func BenchmarkLoadMembers(b *testing.B) {
	f := setup(b)
	f.apply(b, mustParse(b, "name: r\nversion: 1\ndata_source: {columns: [email, display_name, target_database]}\n"+phase))
	rows := make([]Member, 10_000)
	for i := range rows {
		rows[i] = Member{Key: fmt.Sprintf("user%05d@contoso.com", i), BatchTime: batch1.Add(time.Duration(i%10) * 24 * time.Hour),
			Values: map[string]string{"email": fmt.Sprintf("user%05d@contoso.com", i), "display_name": fmt.Sprintf("User %d", i), "target_database": "DB01"}}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Alternate the database so every other load updates every row.
		db := fmt.Sprintf("DB%02d", i%2)
		for j := range rows {
			rows[j].Values["target_database"] = db
		}
		if _, err := f.store.LoadMembers(f.ctx, "r", 1, rows, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/10_000, "µs/member")
}
