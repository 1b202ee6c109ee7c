package ledger

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lucius-platform/lucius/base/pgtest"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := New(pool, slog.New(slog.DiscardHandler))
	t.Cleanup(store.Close)
	return store
}

// What AfterCommit registers runs once the transaction is committed (its
// writes are visible to others then), and never for one that rolled back,
// whether fn failed or the commit did.
func TestAfterCommitRunsOnlyForACommittedTransaction(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	event := Event{JobID: "j1", Type: EventJobAccepted}
	var visible []int
	count := func() int {
		var n int
		if err := store.pool.QueryRow(ctx, `SELECT count(*) FROM job_events WHERE job_id = 'j1'`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	err := store.InTx(ctx, func(tx *Tx) error {
		tx.Append(event)
		tx.AfterCommit(func() { visible = append(visible, count()) })
		return nil
	})
	if err != nil || len(visible) != 1 || visible[0] != 1 {
		t.Fatalf("committed: err %v, hook saw %v; want one run that sees the event", err, visible)
	}

	failed := errors.New("fn failed")
	ran := false
	err = store.InTx(ctx, func(tx *Tx) error {
		tx.Append(event)
		tx.AfterCommit(func() { ran = true })
		return failed
	})
	if !errors.Is(err, failed) || ran {
		t.Fatalf("fn failed: err %v, hook ran %t; want the error and no run", err, ran)
	}
	err = store.InTx(ctx, func(tx *Tx) error {
		tx.AfterCommit(func() { ran = true })
		return tx.UpdateJob(ctx, &Job{JobID: "no such job", Status: JobSucceeded}) // its check fails at the commit
	})
	if err == nil || ran {
		t.Fatalf("commit failed: err %v, hook ran %t; want an error and no run", err, ran)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d events, want the committed one only", n)
	}
}

// lucius_dead_letters_total counts a dead letter once it is committed, a
// bus dead letter collected twice once; lucius_dead_letters_pending's query
// counts a step dead letter until its job is replayed.
func TestDeadLettersAreCountedOnceCommittedAndPendingUntilReplayed(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	step, bus := attribute.String("kind", DeadLetterStep), attribute.String("kind", DeadLetterBus)
	stepBefore, busBefore := metrics.Value(t, MetricDeadLetters, step), metrics.Value(t, MetricDeadLetters, bus)

	letter := DeadLetter{Kind: DeadLetterStep, JobID: "j1", StepID: "ocr", AttemptNo: 3, Reason: "MAX_ATTEMPTS_EXHAUSTED"}
	rolledBack := errors.New("roll back")
	err := store.InTx(ctx, func(tx *Tx) error {
		if err := tx.InsertDeadLetter(ctx, letter); err != nil {
			return err
		}
		return rolledBack
	})
	if !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	if got := metrics.Value(t, MetricDeadLetters, step) - stepBefore; got != 0 {
		t.Fatalf("a rolled-back dead letter was counted: %v", got)
	}
	if err := store.InTx(ctx, func(tx *Tx) error { return tx.InsertDeadLetter(ctx, letter) }); err != nil {
		t.Fatal(err)
	}
	poison := DeadLetter{Kind: DeadLetterBus, JobID: "j2", Reason: "PoisonMessage", Entity: "orchestrator-jobs/$deadletterqueue", MessageID: "m1"}
	for range 2 {
		if _, err := store.CollectDeadLetter(ctx, poison); err != nil {
			t.Fatal(err)
		}
	}
	if s, b := metrics.Value(t, MetricDeadLetters, step)-stepBefore, metrics.Value(t, MetricDeadLetters, bus)-busBefore; s != 1 || b != 1 {
		t.Fatalf("counted %v step and %v bus dead letters, want 1 and 1", s, b)
	}

	pending, err := store.PendingDeadLetters(ctx)
	if err != nil || pending[DeadLetterStep] != 1 || pending[DeadLetterBus] != 1 {
		t.Fatalf("pending %v (%v), want one of each kind", pending, err)
	}
	if err := store.InTx(ctx, func(tx *Tx) error { return tx.MarkReplayed(ctx, "j1", "j1-replay") }); err != nil {
		t.Fatal(err)
	}
	pending, err = store.PendingDeadLetters(ctx)
	if err != nil || len(pending) != 1 || pending[DeadLetterBus] != 1 {
		t.Fatalf("pending after the replay %v (%v), want the bus dead letter only", pending, err)
	}
}
