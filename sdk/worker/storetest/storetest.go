// Package storetest is the conformance suite of worker.Store: every
// implementation (worker.PGStore, or a fork's own on another database) must
// pass it.
//
//	func TestStoreConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) worker.Store { return newMyStore(t) })
//	}
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// Run runs every case against stores made by newStore. Cases run in
// parallel and use random keys, so newStore may return one shared store.
func Run(t *testing.T, newStore func(t *testing.T) worker.Store) {
	t.Helper()
	// The cases share the store and use random keys, so they run in
	// parallel; pruning deletes every old record, so it runs after them.
	t.Run("parallel", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, s worker.Store)
		}{
			{"first claim acquires", firstClaimAcquires},
			{"live claim is busy for others", liveClaimIsBusy},
			{"finished attempt returns its stored result", finishedReturnsResult},
			{"expired claim is taken over", expiredClaimTakenOver},
			{"released claim is taken over at once", releasedClaimTakenOver},
			{"extend keeps a claim alive", extendKeepsClaim},
			{"forget removes an unexecuted claim", forgetRemovesClaim},
			{"only the holder may finish", onlyHolderFinishes},
			{"every key component distinguishes attempts", keyComponentsDistinguish},
			{"a step's effect is recorded once", effectRecordedOncePerStep},
			{"concurrent attempts commit one effect", concurrentEffectsCommitOnce},
			{"a refused finish records no effect", refusedFinishRecordsNoEffect},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, newStore(t))
			})
		}
	})
	t.Run("prune deletes old finished records and effects only", func(t *testing.T) {
		pruneDeletesOldFinished(t, newStore(t))
	})
}

func newKey(t *testing.T) worker.Key {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return worker.Key{JobID: hex.EncodeToString(b), StepID: "embedding", AttemptNo: 2, LeaseID: "6f1c1e8e-6a0b-4bbf-9b39-0f5d0c1b2a3c"}
}

func claim(t *testing.T, s worker.Store, k worker.Key, workerID string, until time.Time) worker.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), worker.Claim{Key: k, Service: "embedding", WorkerID: workerID, Until: until})
	if err != nil {
		t.Fatalf("claim %s by %s: %v", k, workerID, err)
	}
	return res
}

func result(k worker.Key) *luciusv1.ResultRequest {
	out, _ := structpb.NewStruct(map[string]any{"chunks": 3.0, "model": "featurehash"})
	return &luciusv1.ResultRequest{
		JobId: k.JobID, StepId: k.StepID, AttemptNo: int32(k.AttemptNo), LeaseId: k.LeaseID,
		Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED,
		Artifacts: []*luciusv1.ArtifactRef{{Name: "vectors", Uri: "file:///ws/embedding/2/vectors.json", MediaType: "application/json",
			SizeBytes: 1234, Sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}},
		Output:     out,
		StartTime:  timestamppb.New(time.Unix(1_800_000_000, 123_000_000)),
		FinishTime: timestamppb.New(time.Unix(1_800_000_001, 456_000_000)),
		WorkerId:   "w1",
	}
}

func later() time.Time { return time.Now().Add(time.Minute) }

func wantState(t *testing.T, got worker.ClaimResult, state worker.ClaimState, tookOver bool) {
	t.Helper()
	if got.State != state || got.TookOver != tookOver {
		t.Fatalf("claim = %v (took over %v), want %v (took over %v)", got.State, got.TookOver, state, tookOver)
	}
}

func firstClaimAcquires(t *testing.T, s worker.Store) {
	wantState(t, claim(t, s, newKey(t), "w1", later()), worker.ClaimAcquired, false)
}

func liveClaimIsBusy(t *testing.T, s worker.Store) {
	k := newKey(t)
	claim(t, s, k, "w1", later())
	wantState(t, claim(t, s, k, "w2", later()), worker.ClaimBusy, false)
	wantState(t, claim(t, s, k, "w1", later()), worker.ClaimBusy, false)
}

func finishedReturnsResult(t *testing.T, s worker.Store) {
	ctx := context.Background()
	k := newKey(t)
	claim(t, s, k, "w1", later())
	want := result(k)
	if _, err := s.Finish(ctx, k, "w1", want, nil); err != nil {
		t.Fatal(err)
	}
	got := claim(t, s, k, "w2", later())
	wantState(t, got, worker.ClaimDone, false)
	if !proto.Equal(got.Result, want) {
		t.Fatalf("stored result = %v, want %v", got.Result, want)
	}
	failed := newKey(t)
	claim(t, s, failed, "w1", later())
	res := &luciusv1.ResultRequest{JobId: failed.JobID, StepId: failed.StepID, AttemptNo: int32(failed.AttemptNo), LeaseId: failed.LeaseID,
		Status: luciusv1.ResultStatus_RESULT_STATUS_FAILED, FailureClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE,
		Reason: "INVALID_INPUT: not UTF-8", FinishTime: timestamppb.Now()}
	if _, err := s.Finish(ctx, failed, "w1", res, nil); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, failed, "w1", later()); got.State != worker.ClaimDone || !proto.Equal(got.Result, res) {
		t.Fatalf("stored failure = %+v, want %v", got, res)
	}
}

func expiredClaimTakenOver(t *testing.T, s worker.Store) {
	k := newKey(t)
	claim(t, s, k, "w1", time.Now().Add(-time.Second))
	wantState(t, claim(t, s, k, "w2", later()), worker.ClaimAcquired, true)
	if _, err := s.Finish(context.Background(), k, "w1", result(k), nil); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("finish by the previous holder: %v, want ErrClaimLost", err)
	}
	if _, err := s.Finish(context.Background(), k, "w2", result(k), nil); err != nil {
		t.Fatalf("finish by the new holder: %v", err)
	}
}

func releasedClaimTakenOver(t *testing.T, s worker.Store) {
	k := newKey(t)
	claim(t, s, k, "w1", later())
	if err := s.Release(context.Background(), k, "w1"); err != nil {
		t.Fatal(err)
	}
	wantState(t, claim(t, s, k, "w2", later()), worker.ClaimAcquired, true)
	if err := s.Release(context.Background(), k, "w1"); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("release by a former holder: %v, want ErrClaimLost", err)
	}
}

func extendKeepsClaim(t *testing.T, s worker.Store) {
	ctx := context.Background()
	k := newKey(t)
	claim(t, s, k, "w1", time.Now().Add(-time.Second))
	if err := s.Extend(ctx, k, "w1", later()); err != nil {
		t.Fatal(err)
	}
	wantState(t, claim(t, s, k, "w2", later()), worker.ClaimBusy, false)
	if err := s.Extend(ctx, k, "w2", later()); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("extend by a non-holder: %v, want ErrClaimLost", err)
	}
	if err := s.Extend(ctx, newKey(t), "w1", later()); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("extend of an unknown key: %v, want ErrClaimLost", err)
	}
}

func forgetRemovesClaim(t *testing.T, s worker.Store) {
	ctx := context.Background()
	k := newKey(t)
	claim(t, s, k, "w1", later())
	if err := s.Forget(ctx, k, "w2"); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("forget by a non-holder: %v, want ErrClaimLost", err)
	}
	if err := s.Forget(ctx, k, "w1"); err != nil {
		t.Fatal(err)
	}
	wantState(t, claim(t, s, k, "w2", later()), worker.ClaimAcquired, false)
	if _, err := s.Finish(ctx, k, "w2", result(k), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, k, "w2"); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("forget of a finished attempt: %v, want ErrClaimLost (finished records are kept)", err)
	}
	wantState(t, claim(t, s, k, "w3", later()), worker.ClaimDone, false)
}

func onlyHolderFinishes(t *testing.T, s worker.Store) {
	ctx := context.Background()
	k := newKey(t)
	if _, err := s.Finish(ctx, k, "w1", result(k), nil); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("finish without a claim: %v, want ErrClaimLost", err)
	}
	claim(t, s, k, "w1", later())
	if _, err := s.Finish(ctx, k, "w2", result(k), nil); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("finish by a non-holder: %v, want ErrClaimLost", err)
	}
	if _, err := s.Finish(ctx, k, "w1", result(k), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, k, "w1", result(k), nil); !errors.Is(err, worker.ErrClaimLost) {
		t.Fatalf("second finish: %v, want ErrClaimLost", err)
	}
}

func keyComponentsDistinguish(t *testing.T, s worker.Store) {
	base := newKey(t)
	claim(t, s, base, "w1", later())
	variants := []worker.Key{base, base, base}
	variants[0].StepID = "sis"
	variants[1].AttemptNo = 3
	variants[2].LeaseID = "0b8a2b8e-1b54-4a43-b9c5-52b9c1b8c0de"
	for _, v := range variants {
		wantState(t, claim(t, s, v, "w2", later()), worker.ClaimAcquired, false)
	}
}

func effect(k worker.Key, workerID string) worker.Effect {
	return worker.Effect{Key: k, Service: "embedding", WorkerID: workerID}
}

// recordEffect claims e's attempt and finishes it successfully with its
// effect, reporting whether the effect was inserted.
func recordEffect(t *testing.T, s worker.Store, e worker.Effect) bool {
	t.Helper()
	wantState(t, claim(t, s, e.Key, e.WorkerID, later()), worker.ClaimAcquired, false)
	inserted, err := s.Finish(context.Background(), e.Key, e.WorkerID, result(e.Key), &e)
	if err != nil {
		t.Fatalf("finish %s by %s with its effect: %v", e.Key, e.WorkerID, err)
	}
	return inserted
}

func effectRecordedOncePerStep(t *testing.T, s worker.Store) {
	first := newKey(t)
	if !recordEffect(t, s, effect(first, "w1")) {
		t.Fatal("the first effect of a step was not inserted")
	}
	e := effect(first, "w1")
	if inserted, err := s.Finish(context.Background(), first, "w1", result(first), &e); !errors.Is(err, worker.ErrClaimLost) || inserted {
		t.Errorf("finishing the attempt again = %v, %v; want ErrClaimLost and no effect", inserted, err)
	}
	later := first
	later.AttemptNo, later.LeaseID = first.AttemptNo+1, "0b8a2b8e-1b54-4a43-b9c5-52b9c1b8c0de"
	if recordEffect(t, s, effect(later, "w2")) {
		t.Error("a later attempt of the step recorded a second effect")
	}
	// The step, not the attempt, is the key: other steps and jobs are apart.
	otherStep := first
	otherStep.StepID = "sis"
	otherJob := newKey(t)
	otherJob.StepID, otherJob.AttemptNo, otherJob.LeaseID = first.StepID, first.AttemptNo, first.LeaseID
	for _, k := range []worker.Key{otherStep, otherJob} {
		if !recordEffect(t, s, effect(k, "w1")) {
			t.Errorf("effect of %s was not inserted: another step's effect blocked it", k)
		}
	}
}

func concurrentEffectsCommitOnce(t *testing.T, s worker.Store) {
	base := newKey(t)
	const attempts = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inserted int
		errs     []error
	)
	for i := range attempts {
		wg.Go(func() {
			k := base
			k.AttemptNo, k.LeaseID = i+1, fmt.Sprintf("6f1c1e8e-6a0b-4bbf-9b39-%012d", i)
			e := effect(k, fmt.Sprintf("w%d", i))
			var ok bool
			_, err := s.Claim(context.Background(), worker.Claim{Key: k, Service: e.Service, WorkerID: e.WorkerID, Until: later()})
			if err == nil {
				ok, err = s.Finish(context.Background(), k, e.WorkerID, result(k), &e)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				inserted++
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if inserted != 1 {
		t.Errorf("%d of %d concurrent attempts inserted the step's effect, want exactly 1", inserted, attempts)
	}
}

func pruneDeletesOldFinished(t *testing.T, s worker.Store) {
	ctx := context.Background()
	finished, running := newKey(t), newKey(t)
	for _, k := range []worker.Key{finished, running} {
		wantState(t, claim(t, s, k, "w1", later()), worker.ClaimAcquired, false)
	}
	first := effect(finished, "w1")
	if inserted, err := s.Finish(ctx, finished, "w1", result(finished), &first); err != nil || !inserted {
		t.Fatalf("finish with the first effect = %v, %v", inserted, err)
	}
	if n, err := s.Prune(ctx, time.Now().Add(-time.Hour), 100); err != nil {
		t.Fatal(err)
	} else if got := claim(t, s, finished, "w2", later()); got.State != worker.ClaimDone {
		t.Fatalf("prune before an hour ago deleted %d and the finished record: claim = %v", n, got.State)
	}
	var total int64
	for {
		n, err := s.Prune(ctx, time.Now().Add(time.Hour), 1)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 1 {
			t.Fatalf("prune with batch 1 deleted %d", n)
		}
		total += n
	}
	if total < 2 {
		t.Fatalf("prune deleted %d records, want at least the finished attempt and its effect", total)
	}
	wantState(t, claim(t, s, running, "w2", later()), worker.ClaimBusy, false)
	if !recordEffect(t, s, effect(finished, "w2")) {
		t.Fatal("the pruned record or effect still blocks a new one")
	}
}

func refusedFinishRecordsNoEffect(t *testing.T, s worker.Store) {
	ctx := context.Background()
	k := newKey(t)
	wantState(t, claim(t, s, k, "w1", later()), worker.ClaimAcquired, false)
	intruder := effect(k, "w2")
	if inserted, err := s.Finish(ctx, k, "w2", result(k), &intruder); !errors.Is(err, worker.ErrClaimLost) || inserted {
		t.Fatalf("finish by a worker without the claim = %v, %v; want ErrClaimLost", inserted, err)
	}
	holder := effect(k, "w1")
	if inserted, err := s.Finish(ctx, k, "w1", result(k), &holder); err != nil || !inserted {
		t.Fatalf("the holder's finish = %v, %v; want its effect inserted (the refused one recorded none)", inserted, err)
	}
}
