package e2e

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// repoRoot is the repository, from this package's folder.
const repoRoot = "../.."

// observedMetrics reads the metric names the dashboards and alert rules
// under deploy/observability use: deploy/observability/metrics.txt, which
// deploy/check keeps equal to what their PromQL names (parsed with
// Prometheus's own parser).
func observedMetrics(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "deploy/observability/metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("deploy/observability/metrics.txt names %d metrics; the dashboards use more", len(names))
	}
	return names
}

// exported is what every process of the suite exports: sample names, and
// family names with their types.
type exported struct {
	samples  map[string]bool
	families map[string]string
}

// has says whether name is exported: a sample of that name, or (for a
// histogram named without its _bucket/_sum/_count) the family.
func (e exported) has(name string) bool {
	return e.samples[name] || e.families[name] != ""
}

// scrapeEveryProcess scrapes /metrics of the gateway, the orchestrators,
// the reconciler, the scheduler and every worker, with the operator token.
func (s *suite) scrapeEveryProcess() exported {
	s.t.Helper()
	e := exported{samples: map[string]bool{}, families: map[string]string{}}
	addrs := append([]string{s.Endpoints.GatewayHTTP, s.Endpoints.Reconciler, s.Endpoints.Scheduler}, s.Endpoints.OrchHTTP...)
	for _, addr := range s.Endpoints.Workers {
		addrs = append(addrs, addr)
	}
	for _, addr := range addrs {
		for _, line := range strings.Split(s.scrape(addr), "\n") {
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				if name, typ, ok := strings.Cut(rest, " "); ok {
					e.families[name] = typ
				}
				continue
			}
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if i := strings.IndexAny(line, "{ "); i > 0 {
				e.samples[line[:i]] = true
			}
		}
	}
	return e
}

// Every metric the Grafana dashboards and the Prometheus rules under
// deploy/observability name is exported by some process of a real suite
// after a small run: a three-step job to SUCCEEDED with a completion
// webhook, a step nobody acknowledges (retried, then a step dead letter),
// and a bus message nobody can read (a bus dead letter).
func TestObservabilityMetricsAreExported(t *testing.T) {
	t.Parallel()
	want := observedMetrics(t)
	s := startSuite(t, suiteOptions{env: map[string]string{
		"LUCIUS_SWEEP_ACK_INTERVAL":        "200ms",
		"LUCIUS_SWEEP_LEASE_INTERVAL":      "200ms",
		"LUCIUS_SWEEP_DEADLETTER_INTERVAL": "200ms",
		"LUCIUS_ORPHAN_SCAN_INTERVAL":      "300ms",
		"LUCIUS_CALLBACK_BACKOFF":          "200ms",
	}})

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if code, body := s.rest("PUT", "/v1/config/tenants/acme", map[string]any{"webhook_secrets": []string{secret}}); code != http.StatusOK {
		t.Fatalf("set the webhook secret: %d %v", code, body)
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer hook.Close()
	out, _ := s.output("observability.json")
	pipeline := s.submit("OCR_EMBEDDING_SIS", map[string]any{"prompt_set": []any{"when are invoices due?"}},
		s.input("observability.txt", sampleText), out, hook.URL+"/hooks/lucius")
	code, body := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "E2E_FLAKY",
		"schema_version": "1", "input_ref": "file://" + s.inputs + "/in", "output_ref": "file://" + s.inputs + "/out", "payload": map[string]any{}})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, body)
	}
	flaky := body["job_id"].(string)

	b, err := s.OpenBus(s.ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(s.ctx) //nolint:errcheck
	sender, err := b.NewSender(s.ctx, topology.QueueOrchestratorJobs)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(s.ctx) //nolint:errcheck
	if err := sender.Send(s.ctx, bus.Message{ID: "observability-poison", Body: []byte("not a job")}); err != nil {
		t.Fatal(err)
	}
	for id, status := range map[string]luciusv1.JobStatus{pipeline: luciusv1.JobStatus_JOB_STATUS_SUCCEEDED, flaky: luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL} {
		if job := s.waitJob(id, 60*time.Second); job.GetStatus() != status {
			t.Fatalf("job %s ended %s (%s), want %s", id, job.GetStatus(), job.GetReason(), status)
		}
	}

	// Counters appear once their transaction commits, the webhook and the
	// bus dead letter are handled in the background: scrape until all is there.
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.scrapeEveryProcess()
		missing = slices.DeleteFunc(slices.Clone(want), got.has)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Fatalf("deploy/observability uses metrics no process exports after the run:\n  %s", strings.Join(missing, "\n  "))
	}
}

// helmBinary is the pinned helm `make deploy-check` installs.
func helmBinary(t *testing.T) string {
	t.Helper()
	for _, h := range []string{os.Getenv("HELM"), filepath.Join(binDir, "helm"), filepath.Join(repoRoot, ".build/bin/helm")} {
		if h == "" {
			continue
		}
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	t.Fatal("no helm: run `make deploy-check`, which installs the pinned helm into .build/bin")
	return ""
}

// pgQuery matches a rendered KEDA PostgreSQL trigger's query.
var pgQuery = regexp.MustCompile(`(?m)^\s+query: "(SELECT [^"]+)"$`)

// The KEDA PostgreSQL scaler queries the chart renders run on the real
// schema and count what a pool's receivers would drain: the active
// directives of the pool's services on every directive topic, not those
// scheduled for later nor another service's.
func TestKEDAPostgresQueriesCountWhatThePoolDrains(t *testing.T) {
	t.Parallel()
	if e2eBus != "" && e2eBus != "postgres" {
		t.Skip("the PostgreSQL scaler reads the PostgreSQL bus's tables")
	}
	helm := helmBinary(t)
	s := startSuite(t, suiteOptions{workers: []string{"ocr"}})
	const service = "e2e-keda"
	cmd := exec.Command(helm, "template", "lucius", filepath.Join(repoRoot, "deploy/helm/lucius"), "--kube-version", "1.31.0",
		"--set", "keda.enabled=true", "--set", "workers.pools[0].name=keda", "--set", "workers.pools[0].services={"+service+"}")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var queries []string
	for _, m := range pgQuery.FindAllSubmatch(rendered, -1) {
		queries = append(queries, string(m[1]))
	}
	if len(queries) != 2 {
		t.Fatalf("%d PostgreSQL scaler queries rendered, want 2 (the orchestrators', the pool's)", len(queries))
	}
	orchestrators, pool := queries[0], queries[1]
	if !strings.Contains(pool, service) {
		t.Fatalf("the second query is not the pool's: %s", pool)
	}

	b, err := s.OpenBus(s.ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(s.ctx) //nolint:errcheck
	if err := topology.DeclareService(s.ctx, b, topology.Config{}, service); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(s.ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if n := count(pool); n != 0 {
		t.Fatalf("the pool's query counts %d before anything is sent", n)
	}
	send := func(topic, id, svc string, at time.Time) {
		t.Helper()
		sender, err := b.NewSender(s.ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close(s.ctx) //nolint:errcheck
		if err := sender.Send(s.ctx, bus.Message{ID: id, Body: []byte("{}"), ScheduledAt: at,
			Properties: map[string]string{topology.PropertyService: svc}}); err != nil {
			t.Fatal(err)
		}
	}
	send("global-default-p0", "keda-1", service, time.Time{})
	send("global-default-p15", "keda-2", service, time.Time{})
	send("global-burst-p7", "keda-3", service, time.Time{})
	send("global-default-p3", "keda-later", service, time.Now().Add(time.Hour)) // scheduled: not work yet
	send("global-default-p3", "keda-other", "e2e-keda-other", time.Time{})      // no subscription of the pool
	if n := count(pool); n != 3 {
		t.Fatalf("the pool's query counts %d, want the 3 active directives", n)
	}
	// The orchestrators' inbox: idle after the suite started, then a message.
	deadline := time.Now().Add(10 * time.Second)
	for count(orchestrators) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := count(orchestrators); n != 0 {
		t.Fatalf("the orchestrators' query counts %d on an idle suite", n)
	}
	send(topology.QueueOrchestratorJobs, "keda-job", "", time.Now().Add(time.Hour))
	if n := count(orchestrators); n != 0 {
		t.Fatalf("the orchestrators' query counts a job scheduled for later: %d", n)
	}
	var scheduled int
	if err := s.pool.QueryRow(s.ctx, `SELECT count(*) FROM bus_messages WHERE path = $1`, topology.QueueOrchestratorJobs).Scan(&scheduled); err != nil || scheduled != 1 {
		t.Fatalf("orchestrator-jobs holds %d messages (%v), want the scheduled one", scheduled, err)
	}
}

// `orchestrator migrate` brings an empty database to the schema every
// service uses (the Helm chart's migration Job runs it) and is a no-op the
// second time; `<service> healthcheck` (the images' HEALTHCHECK) exits 0
// only when the service's /healthz answers 200.
func TestMigrateAndHealthcheckCommands(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDB(t)
	run := func(args []string, env ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, args[0]), args[1:]...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for i := range 2 {
		if out, err := run([]string{"orchestrator", "migrate"}, "DATABASE_URL="+dbURL, "LUCIUS_BUS=postgres"); err != nil {
			t.Fatalf("orchestrator migrate (run %d): %v\n%s", i+1, err, out)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, set := range []migrate.Set{ledger.Migrations, config.Migrations, runbook.Migrations, pgbus.Migrations} {
		files, err := set.Load()
		if err != nil {
			t.Fatal(err)
		}
		var n, top int
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(version_id), 0) FROM `+pgx.Identifier{set.Table()}.Sanitize()+
			` WHERE is_applied AND version_id > 0`).Scan(&n, &top); err != nil {
			t.Fatal(err)
		}
		if n != len(files) || top != len(files) {
			t.Errorf("component %s: %d migrations recorded up to version %d, want all %d once", set.Component, n, top, len(files))
		}
	}

	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer sick.Close()
	for _, svc := range []string{"gateway", "orchestrator", "reconciler", "scheduler"} {
		addrVar := "LUCIUS_" + strings.ToUpper(svc) + "_HTTP_ADDR="
		if out, err := run([]string{svc, "healthcheck"}, addrVar+healthy.Listener.Addr().String()); err != nil {
			t.Errorf("%s healthcheck of a healthy service: %v\n%s", svc, err, out)
		}
		if out, err := run([]string{svc, "healthcheck"}, addrVar+sick.Listener.Addr().String()); err == nil {
			t.Errorf("%s healthcheck of a 503 succeeded: %s", svc, out)
		}
		if out, err := run([]string{svc, "healthcheck"}, addrVar+"127.0.0.1:1"); err == nil {
			t.Errorf("%s healthcheck of nothing succeeded: %s", svc, out)
		}
	}
	if out, err := run([]string{"gateway", "migrate"}); err == nil || !strings.Contains(out, "unknown command") {
		t.Errorf("gateway migrate: %v %s, want an unknown command", err, out)
	}
}
