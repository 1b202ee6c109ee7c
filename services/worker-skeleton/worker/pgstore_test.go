package worker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/pgtest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/worker"
	"github.com/lucius-platform/lucius/services/worker-skeleton/worker/storetest"
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
