package engine_test

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Retention deletes a tenant's jobs that ended before the cutoff with every
// row the ledger keeps of them, oldest first and a batch at a time, and
// leaves live jobs, recent ones, other tenants' and asset revisions' alone.
func TestPurgeFinishedDeletesOnlyOldFinishedJobsOfTheTenant(t *testing.T) {
	t.Parallel()
	f := setup(t)
	finish := func(tenant string, fail bool, asset bool) string {
		t.Helper()
		q, req, msg, err := f.request(tenant, "OCR", ocrInputs, "")
		if err != nil {
			t.Fatal(err)
		}
		if asset {
			refs := map[string]string{"dataset_id": q.JobId}
			req.Asset = ledger.AssetRef{AssetID: ledger.AssetIDOf("ddh", refs), PlatformID: "ddh", PlatformRefs: refs}
		}
		if _, err := f.store.Accept(f.ctx, req, msg, ledger.Limits{}); err != nil {
			t.Fatal(err)
		}
		f.create(q)
		s := f.current(q.JobId)
		f.ack(s)
		if fail {
			f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, false)
		} else {
			f.succeed(s)
		}
		return q.JobId
	}
	endedDaysAgo := func(jobID string, days int) {
		t.Helper()
		if _, err := f.store.Pool().Exec(f.ctx, `UPDATE jobs SET completed_at = now() - make_interval(days => $2) WHERE job_id = $1`,
			jobID, days); err != nil {
			t.Fatal(err)
		}
	}
	oldest, oldFailed, recent := finish("acme", false, false), finish("acme", true, false), finish("acme", false, false)
	withAsset, otherTenant := finish("acme", false, true), finish("globex", false, false)
	endedDaysAgo(oldest, 30)
	endedDaysAgo(oldFailed, 20)
	endedDaysAgo(recent, 1)
	endedDaysAgo(withAsset, 30)
	endedDaysAgo(otherTenant, 30)
	if _, err := f.submit("acme", "OCR", ocrInputs, "", ledger.Limits{}); err != nil { // accepted, never finished
		t.Fatal(err)
	}

	rows := func(jobID string) map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, table := range []string{"requests", "jobs", "steps", "attempts", "job_events", "outbox", "dead_letters"} {
			var n int
			if err := f.store.Pool().QueryRow(f.ctx, `SELECT count(*) FROM `+table+` WHERE job_id = $1`, jobID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			out[table] = n
		}
		return out
	}
	if r := rows(oldFailed); r["dead_letters"] != 1 || r["attempts"] != 1 || r["job_events"] == 0 {
		t.Fatalf("the failed job's rows before: %v", r)
	}
	kept := map[string]map[string]int{}
	for _, id := range []string{recent, withAsset, otherTenant} {
		kept[id] = rows(id)
	}

	cutoff := time.Now().Add(-7 * 24 * time.Hour)
	n, err := f.store.PurgeFinished(f.ctx, "acme", cutoff, 1)
	if err != nil || n != 1 {
		t.Fatalf("first batch: %d %v, want 1", n, err)
	}
	for table, c := range rows(oldest) {
		if c != 0 {
			t.Fatalf("the oldest job still has %d %s rows after the first batch", c, table)
		}
	}
	if rows(oldFailed)["jobs"] != 1 {
		t.Fatal("a batch of 1 deleted more than the oldest job")
	}
	if n, err := f.store.PurgeFinished(f.ctx, "acme", cutoff, 100); err != nil || n != 1 {
		t.Fatalf("second batch: %d %v, want 1", n, err)
	}
	for table, c := range rows(oldFailed) {
		if c != 0 {
			t.Fatalf("the old failed job still has %d %s rows", c, table)
		}
	}
	for id, before := range kept {
		if after := rows(id); len(after) != len(before) || after["jobs"] != 1 || after["job_events"] != before["job_events"] {
			t.Fatalf("job %s changed: %v → %v", id, before, after)
		}
	}
	if n, err := f.store.PurgeFinished(f.ctx, "acme", cutoff, 100); err != nil || n != 0 {
		t.Fatalf("nothing left to purge, got %d %v", n, err)
	}
	var unfinished int
	if err := f.store.Pool().QueryRow(f.ctx, `SELECT count(*) FROM requests r LEFT JOIN jobs j USING (job_id)
		WHERE r.tenant_id = 'acme' AND j.completed_at IS NULL`).Scan(&unfinished); err != nil || unfinished != 1 {
		t.Fatalf("the unfinished request: %d %v", unfinished, err)
	}
	tenants, err := f.store.Tenants(f.ctx)
	if err != nil || len(tenants) != 2 || tenants[0] != "acme" || tenants[1] != "globex" {
		t.Fatalf("tenants %v %v", tenants, err)
	}
}
