package worker_test

import (
	"context"
	"testing"
	"time"

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

func TestPGStoreEffectKeepsTheFirstAttempt(t *testing.T) {
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
		if _, err := store.Claim(ctx, worker.Claim{Key: e.Key, Service: e.Service, WorkerID: e.WorkerID, Until: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		inserted, err := store.Finish(ctx, e.Key, e.WorkerID, &luciusv1.ResultRequest{JobId: "bb", StepId: "ocr"}, &e)
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
}
