package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Every migration of the control plane's schema goes up, all the way down
// and up again through the command, on a real database: each has a Down
// section that undoes it (or, for a data migration, says it cannot and
// changes nothing).
func TestMigrateUpDownToZeroAndUpAgain(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyDB(t)
	run := func(args ...string) []migrationState {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := rootCommand()
		cmd.SetArgs(append(append([]string{"migrate"}, args...), "--database-url", url, "-o", "json"))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("lucius migrate %v: %v\n%s", args, err, errOut.String())
		}
		var rows []migrationState
		if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
			t.Fatalf("lucius migrate %v: %v\n%s", args, err, out.String())
		}
		return rows
	}
	states := func(rows []migrationState) map[string]int {
		n := map[string]int{}
		for _, r := range rows {
			n[r.State]++
		}
		return n
	}
	before := run("status")
	if s := states(before); s["applied"] != 0 || s["pending"] != len(before) || len(before) < 20 {
		t.Fatalf("a fresh database: %v of %d", s, len(before))
	}
	if s := states(run("up")); s["applied"] != len(before) {
		t.Fatalf("after up: %v", s)
	}
	for i := len(schemaSets) - 1; i >= 0; i-- {
		run("down-to", "0", "--component", schemaSets[i].Component)
	}
	if s := states(run("status")); s["pending"] != len(before) {
		t.Fatalf("after down-to 0 everywhere: %v", s)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE 'goose\_%'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d tables left after every migration was undone", tables)
	}
	if s := states(run("up")); s["applied"] != len(before) {
		t.Fatalf("up again: %v", s)
	}
}
