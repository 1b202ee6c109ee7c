package engine_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

var ocrInputs = map[string]any{}

func (f *fixture) slots() map[string]int {
	f.t.Helper()
	slots, err := f.store.TenantSlots(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return slots
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
	if u := f.slots(); u["flood"] != 10 || len(u) != 1 {
		t.Fatalf("tenant slots %v", u)
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
	if f.slots()["acme"] != 3 {
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
			f.result(q.JobId, s.StepID, 1, s.LeaseID, engine.ResultFailed, false)
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
		if got := f.slots()["acme"]; got != 2 {
			t.Fatalf("after a job %s: %d active, want 2", e.name, got)
		}
		q, err := f.submit("acme", "OCR", ocrInputs, "", limits)
		if err != nil {
			t.Fatalf("after a job %s a slot is free: %v", e.name, err)
		}
		qs = append(qs, q)
		if got := f.slots()["acme"]; got != 3 {
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
	for range 2 {
		if _, err := f.submit("beta", "OCR", ocrInputs, "", ledger.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if fixed, err := f.store.RepairSlots(f.ctx); err != nil || len(fixed) != 0 {
		t.Fatalf("repair of consistent counters: %+v %v", fixed, err)
	}
	// A leak (a slot never given back), a lost one, and a stray counter.
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE admission_usage SET active = active + 3 WHERE key = 'acme';
		UPDATE admission_usage SET active = 1 WHERE key = 'beta';
		INSERT INTO admission_usage (scope, key, active) VALUES ('tenant', 'ghost', 4)`); err != nil {
		t.Fatal(err)
	}
	fixed, err := f.store.RepairSlots(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, r := range fixed {
		got[r.Tenant] = [2]int{r.Was, r.Counted}
	}
	want := map[string][2]int{"acme": {4, 1}, "beta": {1, 2}, "ghost": {4, 0}}
	if len(got) != len(want) {
		t.Fatalf("repairs %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("repairs %v, want %v", got, want)
		}
	}
	if u := f.slots(); u["acme"] != 1 || u["beta"] != 2 || u["ghost"] != 0 {
		t.Fatalf("slots after repair %v", u)
	}
}

// Lane and global limits hold exactly under concurrency although they have
// no counter: 200 concurrent submits from 20 tenants against a limit of 10
// admit exactly 10 in the limited scope, and a finished job frees its place.
func TestLaneAndGlobalLimitsAreExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits ledger.Limits
		scope  string
		// wantBurst is how many of the 100 BURST submits are admitted.
		wantBurst int
	}{
		{"global", ledger.Limits{Global: 10}, ledger.ScopeGlobal, 0},
		{"lane", ledger.Limits{Lane: 10}, ledger.ScopeLane, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var mu sync.Mutex
			admitted := map[string][]*luciusv1.QueuedJob{} // by lane
			submit := func(i int) error {
				q, req, msg, err := f.request(fmt.Sprintf("tenant-%d", i%20), "OCR", ocrInputs, "")
				if err != nil {
					return err
				}
				if i%2 == 1 {
					req.Routing.Mode = "BURST"
				}
				if _, err := f.store.Accept(f.ctx, req, msg, tt.limits); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				admitted[req.Routing.Mode] = append(admitted[req.Routing.Mode], q)
				return nil
			}
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var limit *ledger.LimitError
					if err := submit(i); err != nil && !(errors.As(err, &limit) && limit.Scope == tt.scope && limit.Limit == 10) {
						t.Errorf("submit %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			def, burst := len(admitted["DEFAULT"]), len(admitted["BURST"])
			if def+burst != 10+tt.wantBurst || tt.scope == ledger.ScopeLane && def != 10 {
				t.Fatalf("admitted %d DEFAULT and %d BURST; want %d in all, %d BURST", def, burst, 10+tt.wantBurst, tt.wantBurst)
			}
			var requests int
			if err := f.store.Pool().QueryRow(f.ctx, `SELECT count(*) FROM requests`).Scan(&requests); err != nil {
				t.Fatal(err)
			}
			if requests != 10+tt.wantBurst {
				t.Fatalf("refused submits wrote rows: %d requests", requests)
			}
			// Full: refused. A DEFAULT job finishing frees one place.
			if err := submit(0); !errors.Is(err, ledger.ErrLimitReached) {
				t.Fatalf("submit at the limit: %v", err)
			}
			// The lane case has 10 DEFAULT jobs; under the global limit any
			// job frees the place.
			done := append(admitted["DEFAULT"], admitted["BURST"]...)[0]
			f.create(done)
			f.succeed(f.current(done.JobId))
			if err := submit(0); err != nil {
				t.Fatalf("a place is free: %v", err)
			}
			if err := submit(2); !errors.Is(err, ledger.ErrLimitReached) {
				t.Fatalf("the freed place was taken: %v", err)
			}
		})
	}
}

// A transaction's buffered events and outbox messages are written in the
// order they were buffered (event ids follow it), with absent data and
// delivery times stored as NULL.
func TestBufferedWritesKeepOrderAndNulls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var types []string
	err := f.store.InTx(f.ctx, func(tx *ledger.Tx) error {
		for i := range 5 {
			e := ledger.Event{JobID: "order-job", StepID: fmt.Sprintf("s%d", i), AttemptNo: i, Type: fmt.Sprintf("TYPE_%d", i)}
			if i%2 == 0 {
				e.Data = map[string]any{"i": i}
			}
			types = append(types, e.Type)
			tx.Append(e)
		}
		tx.Enqueue(ledger.OutboxMessage{MessageID: "order-now", Destination: "d", Kind: "k", JobID: "order-job", Body: []byte("a")},
			ledger.OutboxMessage{MessageID: "order-later", Destination: "d", Kind: "k", JobID: "order-job", Body: []byte{0, 1, 2},
				ScheduledAt: at, Properties: map[string]string{"lane": "BURST"}, ContentType: "application/octet-stream"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := f.store.Pool().Query(f.ctx, `SELECT type, data IS NULL, attempt_no FROM job_events WHERE job_id = 'order-job' ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for rows.Next() {
		var typ string
		var noData bool
		var attempt int
		if err := rows.Scan(&typ, &noData, &attempt); err != nil {
			t.Fatal(err)
		}
		if i >= len(types) || typ != types[i] || noData != (i%2 == 1) || attempt != i {
			t.Errorf("event %d: %s, data null %v, attempt %d; want %v", i, typ, noData, attempt, types)
		}
		i++
	}
	if rows.Err() != nil || i != len(types) {
		t.Fatalf("%d events (%v); want %d", i, rows.Err(), len(types))
	}
	var ids []string
	var bodies [][]byte
	var scheduled []*time.Time
	var props []string
	var contentTypes []string
	rows, err = f.store.Pool().Query(f.ctx, `SELECT message_id, body, scheduled_at, properties::text, content_type FROM outbox
		WHERE job_id = 'order-job' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, p, ct string
		var body []byte
		var s *time.Time
		if err := rows.Scan(&id, &body, &s, &p, &ct); err != nil {
			t.Fatal(err)
		}
		ids, bodies, scheduled, props, contentTypes = append(ids, id), append(bodies, body), append(scheduled, s), append(props, p), append(contentTypes, ct)
	}
	if len(ids) != 2 || ids[0] != "order-now" || ids[1] != "order-later" {
		t.Fatalf("outbox %v; want order-now, order-later", ids)
	}
	if string(bodies[0]) != "a" || string(bodies[1]) != "\x00\x01\x02" || scheduled[0] != nil || scheduled[1] == nil || !scheduled[1].Equal(at) ||
		props[0] != "{}" || props[1] != `{"lane": "BURST"}` || contentTypes[0] != "application/json" || contentTypes[1] != "application/octet-stream" {
		t.Fatalf("outbox rows: bodies %q, scheduled %v, properties %v, content types %v", bodies, scheduled, props, contentTypes)
	}
}

// A repeat is found by its request key, not its job id: the gateway mints a
// new id for every submit, and a repeat answers with the first one's.
func TestARepeatIsFoundByItsRequestKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, first, msg, err := f.request("acme", "OCR", ocrInputs, "")
	if err != nil {
		t.Fatal(err)
	}
	first.RequestKey = "key-of-" + first.JobID
	a, err := f.store.Accept(f.ctx, first, msg, ledger.Limits{})
	if err != nil || !a.Created || a.JobID != first.JobID {
		t.Fatalf("first: %+v %v", a, err)
	}
	tests := []struct {
		name    string
		hash    string
		wantErr error
	}{
		{"the same request", first.RequestHash, nil},
		{"another request under the same key", "another hash", ledger.ErrIdempotencyConflict},
	}
	for _, tt := range tests {
		_, again, msg, err := f.request("acme", "OCR", ocrInputs, "")
		if err != nil {
			t.Fatal(err)
		}
		again.RequestKey, again.RequestHash = first.RequestKey, tt.hash
		a, err := f.store.Accept(f.ctx, again, msg, ledger.Limits{})
		if !errors.Is(err, tt.wantErr) || a.Created || a.JobID != first.JobID {
			t.Fatalf("%s: %+v %v, want job %s and error %v", tt.name, a, err, first.JobID, tt.wantErr)
		}
		if exists, err := f.store.RequestExists(f.ctx, again.JobID); err != nil || exists {
			t.Fatalf("%s: the repeat's own id was stored (%v %v)", tt.name, exists, err)
		}
	}
	if exists, err := f.store.RequestExists(f.ctx, first.RequestKey); err != nil || !exists {
		t.Fatalf("RequestExists(key) = %v %v", exists, err)
	}
}
