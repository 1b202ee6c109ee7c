package orchestrator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/telemetry/telemetrytest"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
)

// metrics reads what the package's tests record on the global meter provider.
var metrics *telemetrytest.Reader

func TestMain(m *testing.M) {
	metrics = telemetrytest.InstallGlobal()
	pgtest.Main(m, ledger.Migrations, runbook.Migrations)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newJob accepts a one-step OCR request and creates its job owned by owner.
func newJob(t *testing.T, ctx context.Context, store *ledger.Store, eng *engine.Engine, owner string) string {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString()+uuid.NewString(), "-", "")
	cmd := &luciusv1.Command{TenantId: "acme", RequestType: "OCR", SchemaVersion: "1", InputRef: "file:///in",
		OutputRef: "file:///out", Payload: &structpb.Struct{}}
	raw, _ := protojson.Marshal(cmd)
	req := ledger.Request{JobID: id, TenantID: "acme", RequestHash: "h", RequestType: "OCR", WorkflowVersion: 1,
		InputRef: cmd.InputRef, OutputRef: cmd.OutputRef, Command: raw, Routing: ledger.Routing{Mode: "DEFAULT", Topic: "global-default-p0"}}
	msg, err := engine.QueuedJobMessage(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Accept(ctx, req, msg, ledger.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateJob(ctx, &luciusv1.QueuedJob{JobId: id, Command: cmd}, owner); err != nil {
		t.Fatal(err)
	}
	return id
}

// An instance keeps what it owns at the epochs it took; once another
// instance reclaims a job, this one's heartbeat for it is fenced: rejected,
// logged, recorded, and the job forgotten. Reclaiming orphans adopts them
// and counts them.
func TestOwnershipHeartbeatsAreFencedAfterAReclaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledger.New(pgtest.NewPool(t), nil)
	t.Cleanup(store.Close)
	reg, err := registry.Open(ctx, store, "", workflow.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: reg, WorkspaceRoot: "file:///ws",
		Callbacks: engine.Callbacks{GRPCTarget: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	a, err := newOwnership(store, eng, "orch-a", OwnershipConfig{OrphanThreshold: time.Minute, ReclaimBatch: 10}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	mine := newJob(t, ctx, store, eng, "orch-a")
	if err := a.load(ctx); err != nil {
		t.Fatal(err)
	}
	if held := a.held(); len(held) != 1 || held[0] != (ledger.OwnedJob{JobID: mine, Epoch: 1}) {
		t.Fatalf("loaded %+v", held)
	}
	a.heartbeat(ctx)
	if len(a.held()) != 1 {
		t.Fatal("a live job was dropped")
	}

	// Silence orch-a's job long enough for orch-b to reclaim it.
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET owner_heartbeat_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	b, err := newOwnership(store, eng, "orch-b", OwnershipConfig{OrphanThreshold: time.Minute, ReclaimBatch: 10}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	reclaims := metrics.Value(t, "lucius_orchestrator_reclaims_total")
	b.reclaim(ctx)
	if held := b.held(); len(held) != 1 || held[0] != (ledger.OwnedJob{JobID: mine, Epoch: 2}) {
		t.Fatalf("orch-b reclaimed %+v", held)
	}
	if n := metrics.Value(t, "lucius_orchestrator_reclaims_total") - reclaims; n != 1 {
		t.Fatalf("counted %v reclaims, want 1", n)
	}

	a.heartbeat(ctx) // the zombie's write
	if held := a.held(); len(held) != 0 {
		t.Fatalf("the fenced job is still held: %+v", held)
	}
	if !strings.Contains(logs.String(), "write fenced") {
		t.Fatalf("no fenced-write log line in:\n%s", logs)
	}
	events, err := store.ListEvents(ctx, mine, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	fenced := 0
	for _, e := range events {
		if e.Type == ledger.EventFenced && e.Data["owner"] == "orch-a" && e.Data["current_owner"] == "orch-b" {
			fenced++
		}
	}
	if fenced != 1 {
		t.Fatalf("%d WRITE_FENCED events, want 1", fenced)
	}
	job, err := store.GetJob(ctx, mine)
	if err != nil || job.OwnerID != "orch-b" || job.OwnerEpoch != 2 {
		t.Fatalf("job now %s@%d (%v)", job.OwnerID, job.OwnerEpoch, err)
	}
	// A later heartbeat of the zombie names nothing: no new rejection.
	a.heartbeat(ctx)
	if n := strings.Count(logs.String(), "write fenced"); n != 1 {
		t.Fatalf("%d fenced-write log lines, want 1", n)
	}
}

// testCallbackKeys sign the callback tokens of the tests' directives.
var testCallbackKeys = func() *auth.CallbackKeys {
	k, err := auth.GenerateCallbackKeys()
	if err != nil {
		panic(err)
	}
	return k
}()

// The orphaned-jobs gauge reads the ledger while its ownership lives; once
// closed, a collection after the pool has gone reads nothing from it, so
// every other metric stays readable.
func TestOrphanedJobsGaugeEndsWithItsOwnership(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := ledger.New(pool, nil)
	o, err := newOwnership(store, nil, "orch-gauge", OwnershipConfig{OrphanThreshold: time.Minute, ReclaimBatch: 10},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	metrics.Value(t, "lucius_orchestrator_orphaned_jobs") // collects, with the pool open
	o.close()
	pool.Close()
	metrics.Value(t, "lucius_orchestrator_orphaned_jobs") // fails the test if the gauge still reads the closed pool
}
