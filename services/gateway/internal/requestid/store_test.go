package requestid

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, Migrations) }

type storeSetup struct {
	store *Store
	now   time.Time
}

func setupStore(t *testing.T) *storeSetup {
	t.Helper()
	s := &storeSetup{store: NewStore(pgtest.NewPool(t)), now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	s.store.now = func() time.Time { return s.now }
	return s
}

var (
	key   = Key{Scope: "iss#ops", Method: "/lucius.v1.JobService/CancelJob", RequestID: "r-1"}
	hashA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	hashB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
)

const (
	ttl   = time.Hour
	stale = time.Minute
)

func reserve(t *testing.T, s *Store, k Key, hash []byte) Reservation {
	t.Helper()
	r, err := s.Reserve(context.Background(), k, hash, ttl, stale)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestStoreAnswersARetryWithTheStoredAnswer(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	first := reserve(t, s.store, key, hashA)
	if first.State != Reserved || first.Token == "" {
		t.Fatalf("first reservation %+v, want Reserved with a token", first)
	}
	if r := reserve(t, s.store, key, hashA); r.State != Running {
		t.Fatalf("a retry while the first runs: %+v, want Running", r)
	}
	if err := s.store.Complete(context.Background(), key, first.Token, codes.OK, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	r := reserve(t, s.store, key, hashA)
	if r.State != Done || r.Code != codes.OK || string(r.Answer) != "answer" {
		t.Fatalf("a retry after the first finished: %+v, want Done with its answer", r)
	}
	if r := reserve(t, s.store, key, hashB); r.State != Mismatch {
		t.Fatalf("the same id with another request: %+v, want Mismatch", r)
	}
}

func TestStoreScopesIdsByCallerAndMethod(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	reserve(t, s.store, key, hashA)
	for _, k := range []Key{
		{Scope: "iss#someone-else", Method: key.Method, RequestID: key.RequestID},
		{Scope: key.Scope, Method: "/lucius.v1.JobService/ReplayJob", RequestID: key.RequestID},
	} {
		if r := reserve(t, s.store, k, hashB); r.State != Reserved {
			t.Errorf("%+v: %+v, want Reserved (ids are per caller and method)", k, r)
		}
	}
}

func TestStoreReleasedIdRunsAgain(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	first := reserve(t, s.store, key, hashA)
	if err := s.store.Release(context.Background(), key, first.Token); err != nil {
		t.Fatal(err)
	}
	if r := reserve(t, s.store, key, hashB); r.State != Reserved {
		t.Fatalf("after a release: %+v, want Reserved", r)
	}
}

func TestStoreForgetsExpiredIdsAndTakesOverStaleReservations(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	first := reserve(t, s.store, key, hashA)
	s.now = s.now.Add(stale + time.Second)
	if r := reserve(t, s.store, key, hashB); r.State != Mismatch {
		t.Fatalf("a stale reservation with another request: %+v, want Mismatch", r)
	}
	second := reserve(t, s.store, key, hashA)
	if second.State != Reserved || second.Token == first.Token {
		t.Fatalf("a stale reservation with the same request: %+v, want Reserved with a new token", second)
	}
	// The first owner finishing late does not overwrite the new one's answer.
	if err := s.store.Complete(context.Background(), key, first.Token, codes.OK, []byte("late")); err != nil {
		t.Fatal(err)
	}
	if r := reserve(t, s.store, key, hashA); r.State != Running {
		t.Fatalf("after the fenced late completion: %+v, want Running", r)
	}
	if err := s.store.Complete(context.Background(), key, second.Token, codes.NotFound, []byte("status")); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(ttl)
	if r := reserve(t, s.store, key, hashB); r.State != Reserved {
		t.Fatalf("an expired id: %+v, want Reserved by any request", r)
	}
}

func TestStorePurgesExpiredIds(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	for _, id := range []string{"a", "b", "c"} {
		reserve(t, s.store, Key{Scope: key.Scope, Method: key.Method, RequestID: id}, hashA)
	}
	s.now = s.now.Add(ttl + time.Second)
	reserve(t, s.store, Key{Scope: key.Scope, Method: key.Method, RequestID: "d"}, hashA)
	var n int
	if err := s.store.pool.QueryRow(context.Background(), `SELECT count(*) FROM request_ids`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d rows after the expiry, want 1 (expired ids purged)", n)
	}
}

func TestStoreAdmitsOneOfConcurrentIdenticalCalls(t *testing.T) {
	t.Parallel()
	s := setupStore(t)
	const n = 8
	states := make(chan State, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r, err := s.store.Reserve(context.Background(), key, hashA, ttl, stale)
			if err != nil {
				t.Error(err)
				return
			}
			states <- r.State
		})
	}
	wg.Wait()
	close(states)
	reserved := 0
	for st := range states {
		if st == Reserved {
			reserved++
		} else if st != Running {
			t.Errorf("state %v, want Reserved or Running", st)
		}
	}
	if reserved != 1 {
		t.Fatalf("%d calls reserved the id, want exactly 1", reserved)
	}
}
