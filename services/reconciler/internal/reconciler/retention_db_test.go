package reconciler

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
)

// A round deletes each tenant's jobs that ended longer ago than its
// retention (its own, else the global one; 0 keeps them), and nothing at all
// while every retention is 0.
func TestRetentionRoundFollowsEachTenantsRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := ledger.New(pool, nil)
	now := time.Now()
	ended := func(tenant string, daysAgo int) string {
		t.Helper()
		id := fmt.Sprintf("%s-%d", tenant, daysAgo)
		if _, err := pool.Exec(ctx, `WITH r AS (
			INSERT INTO requests (job_id, request_key, tenant_id, request_hash, request_type, workflow_version, input_ref, output_ref,
				command, resolved_mode, partition, routing_key_used, topic, decision_source, decision_reason)
			VALUES ($1, $1, $2, 'h', 'OCR', 1, 'file:///in', 'file:///out', '{}', 'DEFAULT', 0, $2, 't', 'GLOBAL_CONFIG', 'test')),
		j AS (INSERT INTO jobs (job_id, tenant_id, request_type, workflow_id, workflow_version, status, resolved_mode, partition,
				routing_key_used, topic, decision_source, decision_reason, input_ref, output_ref, completed_at)
			VALUES ($1, $2, 'OCR', 'OCR', 1, 'SUCCEEDED', 'DEFAULT', 0, $2, 't', 'GLOBAL_CONFIG', 'test', 'file:///in', 'file:///out',
				$3::timestamptz - make_interval(days => $4)))
		INSERT INTO admission_usage (scope, key) VALUES ('tenant', $2) ON CONFLICT DO NOTHING`, id, tenant, now, daysAgo); err != nil {
			t.Fatal(err)
		}
		return id
	}
	jobs := map[string]bool{} // job id → kept
	for _, j := range []struct {
		tenant  string
		daysAgo int
		kept    bool
	}{
		{"acme", 10, false}, {"acme", 3, true}, // its own 7 days
		{"globex", 40, false}, {"globex", 10, true}, // the global 30 days
		{"keeper", 400, true}, // its own 0: forever
	} {
		jobs[ended(j.tenant, j.daysAgo)] = j.kept
	}
	m, err := newSweepMetrics(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg := SweepConfig{BatchSize: 1, QueryTimeout: 10 * time.Second} // a batch of 1: the round drains
	forever := &config.Snapshot{Tenants: map[string]config.Tenant{"acme": {}}}
	retentionRound(ctx, store, forever, cfg, now, m)
	if n := jobCount(t, pool); n != len(jobs) {
		t.Fatalf("with every retention 0, %d of %d jobs are left", n, len(jobs))
	}
	days := func(n int) *int { return &n }
	snap := &config.Snapshot{Global: config.Global{RetentionDays: 30}, Tenants: map[string]config.Tenant{
		"acme": {RetentionDays: days(7)}, "keeper": {RetentionDays: days(0)}}}
	retentionRound(ctx, store, snap, cfg, now, m)
	for id, kept := range jobs {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE job_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n == 1) != kept {
			t.Errorf("job %s: %d rows left, kept should be %v", id, n, kept)
		}
	}
}

func jobCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
