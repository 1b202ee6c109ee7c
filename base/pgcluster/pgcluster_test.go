package pgcluster

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/base/freeport"
	"github.com/lucius-platform/lucius/base/freeport/freeporttest"
)

// A port taken between its pick and PostgreSQL's bind costs a retry on
// another port, not the start.
func TestStartTriesAnotherPortWhenItsPortIsTaken(t *testing.T) {
	picker := freeporttest.TakenAt(t, 1)
	pickPort = picker.Pick
	defer func() { pickPort = freeport.Port }()

	// Not t.TempDir: its parent is private to this user, and the server runs
	// as postgres when the tests run as root.
	dir, err := os.MkdirTemp("", "lucius-pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	c, err := Start(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // the temporary directory goes with it
	if picker.Picks() != 2 || c.Port() == picker.Taken {
		t.Fatalf("picked %d ports, serving on %d (taken: %d); want a second pick", picker.Picks(), c.Port(), picker.Taken)
	}
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
}
