// Package pgtest gives every test a fresh PostgreSQL database cloned from a
// migrated template. It uses the server in DATABASE_URL when set (as `make test`
// does, starting one cluster for the whole run); otherwise the test binary starts
// a private throwaway cluster in TestMain and stops it at the end.
//
//	func TestMain(m *testing.M) { pgtest.Main(m, ledger.Migrations) }
//
//	func TestSomething(t *testing.T) {
//		pool := pgtest.NewPool(t)
//		...
//	}
package pgtest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/pgcluster"
)

var (
	serverURL string // any database on the server, used for admin statements
	template  string // name of the migrated template database
	counter   atomic.Int64
)

// Main runs the tests of a package against a server with the given migrations
// applied to every test database. Call it from TestMain.
func Main(m *testing.M, sets ...migrate.Set) {
	os.Exit(run(m, sets))
}

func run(m *testing.M, sets []migrate.Set) int {
	ctx := context.Background()
	serverURL = os.Getenv("DATABASE_URL")
	if serverURL == "" {
		dir, err := os.MkdirTemp("", "lucius-pgtest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer cluster.Stop(context.Background()) //nolint:errcheck
		serverURL = cluster.URL
	}
	var err error
	if template, err = ensureTemplate(ctx, sets); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	return m.Run()
}

// ServerURL is the server the tests run against (DATABASE_URL or the private cluster).
func ServerURL() string { return serverURL }

// NewDB creates an empty, migrated database for one test, dropped when the test
// ends, and returns its URL. Databases isolate LISTEN/NOTIFY channels too.
func NewDB(t testing.TB) string {
	t.Helper()
	return newDB(t, template)
}

// NewEmptyDB creates a database with none of Main's migrations, for tests
// of code that migrates it itself; dropped when the test ends.
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	return newDB(t, "template0")
}

func newDB(t testing.TB, template string) string {
	t.Helper()
	if serverURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	ctx := context.Background()
	name := fmt.Sprintf("t_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000, counter.Add(1))
	admin := connect(t, serverURL)
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		admin := connect(t, serverURL)
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(serverURL, name)
}

// NewPool creates a fresh database (see NewDB) and a pool on it, closed at cleanup.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDB(t))
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func connect(t testing.TB, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	return conn
}

// ensureTemplate creates (once per server and migration content) a database with
// the migrations applied, to clone test databases from.
func ensureTemplate(ctx context.Context, sets []migrate.Set) (string, error) {
	name, err := templateName(sets)
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", redact(serverURL), err)
	}
	defer admin.Close(ctx)
	// Packages test in parallel processes: serialize template creation.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(8119007)`); err != nil {
		return "", err
	}
	defer admin.Exec(ctx, `SELECT pg_advisory_unlock(8119007)`) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", name)); err != nil {
		return "", err
	}
	db, err := sql.Open("pgx", withDatabase(serverURL, name))
	if err != nil {
		return "", err
	}
	err = migrate.Apply(ctx, db, sets...)
	db.Close()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template true", name)); err != nil {
		return "", err
	}
	return name, nil
}

// templateName is derived from the migration contents, so a changed migration
// gets a new template instead of a stale one.
func templateName(sets []migrate.Set) (string, error) {
	h := sha256.New()
	for _, s := range sets {
		fmt.Fprintf(h, "component %s\n", s.Component)
		entries, err := fs.ReadDir(s.FS, ".")
		if err != nil {
			return "", err
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			body, err := fs.ReadFile(s.FS, path.Clean(n))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s %d\n", n, len(body))
			h.Write(body)
		}
	}
	return "tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func withDatabase(u, db string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return u
	}
	parsed.Path = "/" + db
	return parsed.String()
}

func redact(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "(unparseable URL)"
	}
	return strings.Replace(parsed.Redacted(), parsed.Path, "/…", 1)
}
