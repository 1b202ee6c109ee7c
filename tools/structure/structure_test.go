// Package structure holds tests of the repository's shape: rules a review
// would otherwise have to remember.
package structure

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// sqlOwners are the packages that may hold SQL: the stores that own their
// tables, the migration and cluster plumbing, and the measuring tools that
// read the ledger directly (bench, chaos).
var sqlOwners = []string{
	"core/ledger", "core/config", "core/runbook", "bus/pgbus", "sdk/worker",
	"services/gateway/internal/console", "services/gateway/internal/requestid",
	"base/migrate", "base/pgcluster", "base/pgtest",
	"tools/cmd/lucius-bench", "tools/chaos",
}

// escapeOwners may call the ledger's Tx.SQL() and Store.Pool(): the ledger
// itself, and the runbook store, whose writes share the ledger's transaction.
var escapeOwners = []string{"core/ledger", "core/runbook"}

var (
	// sqlText is a statement as Lucius writes them: upper-case keywords.
	sqlText     = regexp.MustCompile("\\bSELECT\\s[^`\"]{0,400}?\\sFROM\\s|\\bINSERT\\s+INTO\\s|\\bUPDATE\\s+\\w+\\s+SET\\s|\\bDELETE\\s+FROM\\s")
	escapeCalls = regexp.MustCompile(`\.(SQL|Pool)\(\)`)
)

// repoRoot is the repository, two folders above this file.
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// sources lists the non-test, non-generated Go files of the modules, by
// path relative to the repository.
func sources(t *testing.T) map[string]string {
	root := repoRoot(t)
	out := map[string]string{}
	for _, top := range []string{"base", "bus", "core", "sdk", "services", "tools"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			body, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			out[filepath.ToSlash(rel)] = string(body)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 100 {
		t.Fatalf("found %d Go files: not the repository", len(out))
	}
	return out
}

func within(path string, pkgs []string) bool {
	dir := filepath.ToSlash(filepath.Dir(path))
	for _, p := range pkgs {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return true
		}
	}
	return false
}

// TestSQLStaysInTheStores: services call store methods; no package outside
// the stores writes SQL or reaches for the ledger's connection.
func TestSQLStaysInTheStores(t *testing.T) {
	for path, body := range sources(t) {
		if !within(path, sqlOwners) {
			if loc := sqlText.FindStringIndex(body); loc != nil {
				t.Errorf("%s:%d holds SQL (%q); move it into the store that owns the table", path,
					strings.Count(body[:loc[0]], "\n")+1, body[loc[0]:loc[1]])
			}
		}
		if !within(path, escapeOwners) {
			if loc := escapeCalls.FindStringIndex(body); loc != nil {
				t.Errorf("%s:%d calls %s: ask the store for what you need", path,
					strings.Count(body[:loc[0]], "\n")+1, body[loc[0]:loc[1]])
			}
		}
	}
}

// TestRulesCatchWhatTheyName: the patterns find what they are meant to.
func TestRulesCatchWhatTheyName(t *testing.T) {
	for _, s := range []string{"`SELECT id FROM jobs`", "`INSERT INTO jobs (a) VALUES (1)`", "`UPDATE steps SET status = $1`", "`DELETE FROM outbox`"} {
		if !sqlText.MatchString(s) {
			t.Errorf("%s is not seen as SQL", s)
		}
	}
	for _, s := range []string{`"select a file"`, `"update the step"`, `// Delete from the map`, "select {\n\tcase <-done:\n\t}\n// from the pool"} {
		if sqlText.MatchString(s) {
			t.Errorf("%s is seen as SQL", s)
		}
	}
	if !escapeCalls.MatchString("tx.SQL().Exec(ctx, q)") || !escapeCalls.MatchString("store.Pool().Query(ctx, q)") {
		t.Error("escape calls not seen")
	}
}
