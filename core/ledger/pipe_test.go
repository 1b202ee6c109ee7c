package ledger

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/telemetry/telemetrytest"
)

// metrics reads what the package's tests record on the global meter provider.
var metrics *telemetrytest.Reader

func TestMain(m *testing.M) {
	metrics = telemetrytest.InstallGlobal()
	pgtest.Main(m, Migrations)
}

// countedPool is a one-connection pool on a fresh database with a scratch
// table pipe_t(id, v), counting its waits on the server.
func countedPool(t *testing.T) (*pgxpool.Pool, *pgtest.Waits) {
	t.Helper()
	pool, waits := pgtest.NewCountingPool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE pipe_t (id int PRIMARY KEY, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	waits.Reset()
	return pool, waits
}

func pipeRows(t *testing.T, pool *pgxpool.Pool) map[int]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, v FROM pipe_t`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for rows.Next() {
		var id, v int
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

const (
	pipeInsert = `INSERT INTO pipe_t (id, v) VALUES ($1, $2)`
	pipeUpdate = `UPDATE pipe_t SET v = $2 WHERE id = $1`
)

func TestPipeSendsHeldStatementsWithTheNextAnswer(t *testing.T) {
	pool, sent := countedPool(t)
	ctx := sent.Counting(context.Background())
	p, err := beginPipe(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Rollback(ctx) //nolint:errcheck
	p.hold("insert", pipeInsert, 1, 10)
	p.holdOne("update", pipeUpdate, 1, 11)
	if sent.Load() != 0 {
		t.Fatalf("held statements went out at once: %d sends", sent.Load())
	}
	var v int
	if err := p.QueryRow(ctx, `SELECT v FROM pipe_t WHERE id = $1`, 1).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 11 {
		t.Errorf("the read saw v = %d, want the held update's 11: statements must run in the order given", v)
	}
	if got := sent.Load(); got != 1 {
		t.Errorf("BEGIN, two writes and a read took %d sends, want 1", got)
	}
	rows, err := p.Query(ctx, `SELECT id FROM pipe_t`) // nothing held: straight through
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	p.holdOne("update", pipeUpdate, 1, 12)
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent.Load(); got != 3 {
		t.Errorf("the whole transaction took %d sends, want 3 (begin+writes+read, read, held write+commit)", got)
	}
	if got := pipeRows(t, pool); got[1] != 12 {
		t.Errorf("committed rows %v, want id 1 = 12", got)
	}
}

func TestPipeHeldWriteFailuresRollBackEverything(t *testing.T) {
	dup := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "23505"
	}
	for _, tc := range []struct {
		name  string
		hold  func(p *pipeTx)
		end   func(ctx context.Context, p *pipeTx) error // what reports the failure
		isErr func(error) bool
	}{
		{"an update that finds no row, at commit",
			func(p *pipeTx) { p.holdOne("update 99", pipeUpdate, 99, 1) },
			func(ctx context.Context, p *pipeTx) error { return p.Commit(ctx) },
			func(err error) bool { return errors.Is(err, ErrNotFound) }},
		{"a duplicate key, at the next read",
			func(p *pipeTx) { p.hold("insert 1 again", pipeInsert, 1, 2) },
			func(ctx context.Context, p *pipeTx) error {
				var n int
				return p.QueryRow(ctx, `SELECT count(*) FROM pipe_t`).Scan(&n)
			},
			dup},
		{"a duplicate key, at the next batch",
			func(p *pipeTx) { p.hold("insert 1 again", pipeInsert, 1, 2) },
			func(ctx context.Context, p *pipeTx) error {
				b := &pgx.Batch{}
				b.Queue(`SELECT 1`)
				return p.SendBatch(ctx, b).Close()
			},
			dup},
		{"a duplicate key, before a COPY",
			func(p *pipeTx) { p.hold("insert 1 again", pipeInsert, 1, 2) },
			func(ctx context.Context, p *pipeTx) error {
				_, err := p.CopyFrom(ctx, pgx.Identifier{"pipe_t"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{7, 7}}))
				return err
			},
			dup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool, _ := countedPool(t)
			p, err := beginPipe(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Exec(ctx, pipeInsert, 1, 1); err != nil {
				t.Fatal(err)
			}
			p.hold("insert 2", pipeInsert, 2, 2)
			tc.hold(p)
			err = tc.end(ctx, p)
			if !tc.isErr(err) {
				t.Fatalf("got %v, want the held write's failure", err)
			}
			p.Rollback(ctx) //nolint:errcheck // after a failed commit the transaction is closed already
			if got := pipeRows(t, pool); len(got) != 0 {
				t.Errorf("rows %v survived a failed transaction", got)
			}
			// No session was left inside the failed transaction.
			var open int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&open); err != nil {
				t.Fatal(err)
			}
			if open != 0 {
				t.Errorf("%d sessions left idle in a transaction", open)
			}
		})
	}
}

func TestPipeThatNeverSpokeSendsNothing(t *testing.T) {
	pool, sent := countedPool(t)
	ctx := sent.Counting(context.Background())
	for _, end := range []func(*pipeTx) error{
		func(p *pipeTx) error { return p.Commit(ctx) },
		func(p *pipeTx) error { return p.Rollback(ctx) },
	} {
		p, err := beginPipe(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if err := end(p); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("a second end: %v, want ErrTxClosed", err)
		}
	}
	if got := sent.Load(); got != 0 {
		t.Errorf("empty transactions sent %d statements", got)
	}
}

// Through the ledger's own API: a write that finds no row fails the
// transaction with ErrNotFound, naming what it wrote.
func TestInTxReportsAHeldWriteThatFoundNothing(t *testing.T) {
	ctx := context.Background()
	s := New(pgtest.NewPool(t), slog.Default())
	defer s.Close()
	err := s.InTx(ctx, func(tx *Tx) error {
		return tx.UpdateJob(ctx, &Job{JobID: "no-such-job", Status: JobSucceeded})
	})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if want := "update job no-such-job"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}
