package pgtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Waits counts the times an operation waited on the server for an answer:
// each statement, batch and COPY sent is one, however many statements a
// batch holds. Only statements under a context from Counting count, so
// background work on the same pool (a notifier) does not. Tests pin how many
// round trips an operation takes with it.
type Waits struct{ n atomic.Int64 }

type countingKey struct{}

// Counting returns ctx with its statements counted.
func (w *Waits) Counting(ctx context.Context) context.Context {
	return context.WithValue(ctx, countingKey{}, w)
}

// Load returns the waits so far.
func (w *Waits) Load() int64 { return w.n.Load() }

// Reset starts counting again from zero.
func (w *Waits) Reset() { w.n.Store(0) }

func (w *Waits) start(ctx context.Context) context.Context {
	if ctx.Value(countingKey{}) == w {
		w.n.Add(1)
	}
	return ctx
}

// TraceQueryStart times a query (pgx.QueryTracer).
func (w *Waits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return w.start(ctx)
}

// TraceQueryEnd is a no-op: the time is taken at the start only.
func (w *Waits) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart times a batch (pgx.BatchTracer).
func (w *Waits) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return w.start(ctx)
}

// TraceBatchQuery is a no-op: the batch is timed as one.
func (w *Waits) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd is a no-op.
func (w *Waits) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart times a COPY (pgx.CopyFromTracer).
func (w *Waits) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return w.start(ctx)
}

// TraceCopyFromEnd is a no-op.
func (w *Waits) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// NewCountingPool is NewPool with its waits on the server counted (see
// Waits.Counting).
func NewCountingPool(t testing.TB) (*pgxpool.Pool, *Waits) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewDB(t))
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	waits := &Waits{}
	cfg.ConnConfig.Tracer = waits
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, waits
}
