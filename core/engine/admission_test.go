package engine_test

import (
	"errors"
	"sync"
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

var ocrInputs = map[string]any{}

func (f *fixture) usage() map[string]int {
	f.t.Helper()
	us, err := f.store.Usage(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for _, u := range us {
		out[u.Scope+"/"+u.Key] = u.Active
	}
	return out
}

// 200 concurrent submits against a tenant limit of 10 admit exactly 10, and
// the refused ones write nothing.
func TestTenantLimitIsExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.submit("flood", "OCR", ocrInputs, "", ledger.Limits{Tenant: 10})
			mu.Lock()
			defer mu.Unlock()
			var limit *ledger.LimitError
			switch {
			case err == nil:
				admitted++
			case errors.As(err, &limit) && limit.Scope == ledger.ScopeTenant && limit.Key == "flood" && limit.Limit == 10:
				refused++
			default:
				t.Errorf("submit: %v", err)
			}
		}()
	}
	wg.Wait()
	if admitted != 10 || refused != 190 {
		t.Fatalf("admitted %d, refused %d; want 10 and 190", admitted, refused)
	}
	var requests, outbox, events int
	if err := f.store.Pool().QueryRow(f.ctx, `SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM outbox),
		(SELECT count(*) FROM job_events)`).Scan(&requests, &outbox, &events); err != nil {
		t.Fatal(err)
	}
	if requests != 10 || outbox != 10 || events != 10 {
		t.Fatalf("refused submits wrote rows: %d requests, %d outbox, %d events", requests, outbox, events)
	}
	if u := f.usage(); u["tenant/flood"] != 10 || u["lane/DEFAULT"] != 10 || u["global/"] != 10 {
		t.Fatalf("usage %v", u)
	}
}

// Every way a job ends gives its slot back; a duplicate submit takes none.
func TestFinishedFailedAndCancelledJobsReleaseTheirSlots(t *testing.T) {
	t.Parallel()
	f := setup(t)
	limits := ledger.Limits{Tenant: 3}
	var qs []*luciusv1.QueuedJob
	for range 2 {
		q, err := f.submit("acme", "OCR", ocrInputs, "", limits)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	q, req, msg, err := f.request("acme", "OCR", ocrInputs, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Accept(f.ctx, req, msg, limits); err != nil {
		t.Fatal(err)
	}
	qs = append(qs, q)
	if _, err := f.submit("acme", "OCR", ocrInputs, "", limits); !errors.Is(err, ledger.ErrLimitReached) {
		t.Fatalf("a fourth job: %v", err)
	}
	// The same request again is not a new job: no slot, no refusal.
	if a, err := f.store.Accept(f.ctx, req, msg, limits); err != nil || a.Created {
		t.Fatalf("duplicate at the limit: %+v %v", a, err)
	}
	if f.usage()["tenant/acme"] != 3 {
		t.Fatal("a duplicate took a slot")
	}
	ends := []struct {
		name string
		end  func(q *luciusv1.QueuedJob)
	}{
		{"succeeded", func(q *luciusv1.QueuedJob) { f.create(q); f.succeed(f.current(q.JobId)) }},
		{"failed", func(q *luciusv1.QueuedJob) {
			f.create(q)
			s := f.current(q.JobId)
			f.result(q.JobId, s.StepID, 1, s.LeaseID, luciusv1.ResultStatus_RESULT_STATUS_FAILED, luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE)
		}},
		{"cancelled before an orchestrator claimed it", func(q *luciusv1.QueuedJob) {
			if _, err := f.eng.Cancel(f.ctx, q.JobId, ""); err != nil {
				t.Fatal(err)
			}
			f.create(q)
		}},
	}
	for _, e := range ends {
		e.end(qs[0])
		qs = qs[1:]
		if got := f.usage()["tenant/acme"]; got != 2 {
			t.Fatalf("after a job %s: %d active, want 2", e.name, got)
		}
		q, err := f.submit("acme", "OCR", ocrInputs, "", limits)
		if err != nil {
			t.Fatalf("after a job %s a slot is free: %v", e.name, err)
		}
		qs = append(qs, q)
		if got := f.usage()["tenant/acme"]; got != 3 {
			t.Fatalf("the new job did not take the slot: %d active", got)
		}
	}
	if fixed, err := f.store.RepairSlots(f.ctx); err != nil || len(fixed) != 0 {
		t.Fatalf("the counters drifted: %+v %v", fixed, err)
	}
}

// Each scope refuses with its own limit named.
func TestLaneAndGlobalLimitsNameTheirScope(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		tenant string
		limits ledger.Limits
		scope  string
	}{
		{"a", ledger.Limits{Lane: 2}, ""},
		{"b", ledger.Limits{Lane: 2}, ""},
		{"c", ledger.Limits{Lane: 2}, ledger.ScopeLane},
		{"c", ledger.Limits{Global: 2}, ledger.ScopeGlobal},
		{"c", ledger.Limits{Tenant: 5, Lane: 3, Global: 3}, ""},
		{"c", ledger.Limits{Tenant: 1}, ledger.ScopeTenant},
	}
	for i, tt := range tests {
		_, err := f.submit(tt.tenant, "OCR", ocrInputs, "", tt.limits)
		var limit *ledger.LimitError
		switch {
		case tt.scope == "" && err != nil:
			t.Fatalf("case %d: %v", i, err)
		case tt.scope != "" && (!errors.As(err, &limit) || limit.Scope != tt.scope):
			t.Fatalf("case %d: %v, want the %s limit", i, err, tt.scope)
		}
	}
}

// The repair check finds counters that drifted from the live work and sets
// them right; consistent counters are left alone.
func TestRepairFindsAndFixesLeakedSlots(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	f.submit("beta", "OCR", ocrInputs, "", ledger.Limits{}) //nolint:errcheck
	if fixed, err := f.store.RepairSlots(f.ctx); err != nil || len(fixed) != 0 {
		t.Fatalf("repair of consistent counters: %+v %v", fixed, err)
	}
	// A leak (a slot never given back) and a lost one, and a stray counter.
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE admission_usage SET active = active + 3 WHERE scope = 'tenant' AND key = 'acme';
		UPDATE admission_usage SET active = 0 WHERE scope = 'global';
		INSERT INTO admission_usage (scope, key, active) VALUES ('tenant', 'ghost', 4)`); err != nil {
		t.Fatal(err)
	}
	fixed, err := f.store.RepairSlots(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, r := range fixed {
		got[r.Scope+"/"+r.Key] = [2]int{r.Was, r.Counted}
	}
	want := map[string][2]int{"tenant/acme": {4, 1}, "global/": {0, 2}, "tenant/ghost": {4, 0}}
	if len(got) != len(want) {
		t.Fatalf("repairs %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("repairs %v, want %v", got, want)
		}
	}
	if u := f.usage(); u["tenant/acme"] != 1 || u["global/"] != 2 || u["tenant/ghost"] != 0 || u["lane/DEFAULT"] != 2 {
		t.Fatalf("usage after repair %v", u)
	}
}
