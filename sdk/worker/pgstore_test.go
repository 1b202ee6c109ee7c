package worker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/pgtest"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/storetest"
)

func TestPGStoreConformance(t *testing.T) {
	t.Parallel()
	store := worker.NewPGStore(pgtest.NewPool(t))
	storetest.Run(t, func(*testing.T) worker.Store { return store })
}

func TestPGStorePruneDeletesOnlyOldFinishedRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := worker.NewPGStore(pool)
	finished := worker.Key{JobID: "aa", StepID: "ocr", AttemptNo: 1, LeaseID: "l1"}
	running := worker.Key{JobID: "aa", StepID: "ocr", AttemptNo: 2, LeaseID: "l2"}
	for _, k := range []worker.Key{finished, running} {
		if _, err := store.Claim(ctx, worker.Claim{Key: k, Service: "ocr", WorkerID: "w", Until: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	res := &luciusv1.ResultRequest{JobId: "aa", StepId: "ocr", AttemptNo: 1, LeaseId: "l1",
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now()}
	if err := store.Finish(ctx, finished, "w", nil); err == nil {
		t.Fatal("Finish accepted a nil result")
	}
	if err := store.Finish(ctx, finished, "w", res); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Prune(ctx, time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("prune of recent records deleted %d (%v), want 0", n, err)
	}
	if n, err := store.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("prune deleted %d (%v), want 1 (the finished record only)", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM worker_executions WHERE finished_at IS NULL`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("unfinished records left = %d (%v), want 1", left, err)
	}
}

func TestPGStoreEffectKeepsTheFirstAttemptAndPrunes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := worker.NewPGStore(pool)
	first := worker.Key{JobID: "bb", StepID: "ocr", AttemptNo: 1, LeaseID: "l1"}
	second := worker.Key{JobID: "bb", StepID: "ocr", AttemptNo: 2, LeaseID: "l2"}
	for i, e := range []worker.Effect{
		{Key: first, Service: "ocr", WorkerID: "w1"},
		{Key: second, Service: "ocr", WorkerID: "w2"},
	} {
		inserted, err := store.RecordEffect(ctx, e)
		if err != nil || inserted != (i == 0) {
			t.Fatalf("record effect %d: inserted %v (%v), want %v", i+1, inserted, err, i == 0)
		}
	}
	var (
		rows, attempt  int
		lease, svc, by string
		committedAt    time.Time
	)
	err := pool.QueryRow(ctx, `SELECT count(*) OVER (), attempt_no, lease_id, service, worker_id, committed_at
		FROM worker_effects WHERE job_id = 'bb'`).Scan(&rows, &attempt, &lease, &svc, &by, &committedAt)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 1 || attempt != 1 || lease != "l1" || svc != "ocr" || by != "w1" || time.Since(committedAt) > time.Minute {
		t.Errorf("worker_effects = %d row(s), attempt %d, lease %s, service %s, worker %s, committed %v; want attempt 1's only",
			rows, attempt, lease, svc, by, committedAt)
	}
	if n, err := store.PruneEffects(ctx, time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("prune of recent effects deleted %d (%v), want 0", n, err)
	}
	if n, err := store.PruneEffects(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("prune deleted %d effects (%v), want 1", n, err)
	}
}
