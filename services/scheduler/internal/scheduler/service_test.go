package scheduler

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/freeport/freeporttest"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/core/runbook"
)

// One runbook that cannot be worked on (its member table is gone, or its
// stored YAML no longer parses) is logged and skipped; the others go on.
func TestABrokenRunbookDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		f.apply(spec{name: name, init: true})
		f.load(name, 1, members(2, start))
	}
	f.exec(`DROP TABLE "runbook_alpha_v1"`)
	f.exec(`UPDATE runbooks SET yaml_content = 'not: [a runbook' WHERE name = 'gamma'`)
	err := f.sched.Tick(f.ctx)
	if err == nil || !strings.Contains(err.Error(), "runbook_alpha_v1") || !strings.Contains(err.Error(), "gamma") {
		t.Fatalf("Tick() = %v, want the failures of alpha and gamma", err)
	}
	equal(t, "events", f.ids(""), []string{"batch-init/1/v1"})
	if got := f.strs(`SELECT runbook_name FROM batches`); len(got) != 1 || got[0] != "beta" {
		t.Fatalf("batches of %v, want beta's", got)
	}
	stages := map[string]bool{}
	for _, r := range f.logs.records {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == keyStage && r.Level == slog.LevelWarn {
				stages[a.Value.String()] = true
			}
			return true
		})
	}
	if !stages[stageLoad] || !stages[stageDetect] {
		t.Fatalf("failures logged for stages %v, want load (gamma) and detect (alpha)", stages)
	}
}

// A phase whose batch has no active member left is still due: phase-due
// with an empty memberIds array (not null), no step executions.
func TestPhaseOfABatchWithoutMembersIsStillDue(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	f.load("mailbox-move", 1, members(1, start))
	f.tick()
	f.load("mailbox-move", 1, []runbook.Member{mbr("other", start.Add(time.Hour))})
	f.clock.Set(start.Add(-time.Hour))
	f.tick()
	msgs := f.messages(runbook.EventPhaseDue)
	if len(msgs) != 1 || !strings.Contains(string(msgs[0].Raw), `"memberIds":[]`) {
		t.Fatalf("phase-due %v", msgs)
	}
}

// Run serves health and ticks: a runbook's batch is detected by the real
// service against a fresh database.
func TestRunDetectsBatchesAndServesHealth(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rb, err := runbook.Parse("t.yaml", []byte(spec{init: true}.yaml()))
	if err != nil {
		t.Fatal(err)
	}
	store := runbook.NewStore(pool)
	if _, _, err := store.Apply(context.Background(), rb, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.LoadMembers(context.Background(), rb.Name, 1, members(2, start), true); err != nil {
		t.Fatal(err)
	}

	grpcAddr, httpAddr := freeporttest.Adopted(t), freeporttest.Adopted(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Service: process.Service{DatabaseURL: url, GRPCAddr: grpcAddr, HTTPAddr: httpAddr},
			Tick: 20 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler stopped with %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var events int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE properties->>'MessageType' = 'batch-init'`).Scan(&events)
		resp, herr := http.Get("http://" + httpAddr + "/readyz")
		ready := herr == nil && resp.StatusCode == http.StatusOK
		if herr == nil {
			resp.Body.Close()
		}
		if err == nil && events == 1 && ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no batch-init (%d, %v) or not ready (%v)", events, err, herr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
