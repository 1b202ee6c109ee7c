package database_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Connections carry the process's name, so pg_stat_activity says which
// service holds them, unless the URL names them itself.
func TestOpenNamesConnectionsAfterTheProcess(t *testing.T) {
	db := pgtest.NewDB(t)
	named, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := named.Query()
	q.Set("application_name", "ops-console")
	named.RawQuery = q.Encode()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"from the process", db, filepath.Base(os.Args[0])},
		{"from the URL", named.String(), "ops-console"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := database.Open(context.Background(), tc.url, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var got string
			if err := pool.QueryRow(context.Background(), `SELECT current_setting('application_name')`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("application_name = %q, want %q", got, tc.want)
			}
		})
	}
}
