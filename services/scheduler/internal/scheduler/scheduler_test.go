package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

func TestMain(m *testing.M) { pgtest.Main(m, ledger.Migrations, runbook.Migrations) }

// start is the batch start time most tests use.
var start = time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC)

// clock is the injected clock: tests move it by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// logs keeps the records a scheduler logged.
type logs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// find returns the attributes of the records with message msg.
func (l *logs) find(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	store    *ledger.Store
	runbooks *runbook.Store
	clock    *clock
	logs     *logs
	sched    *Scheduler
}

// setup gives a test its own database, a clock at start - 2h and a scheduler.
func setup(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	f := &fixture{t: t, ctx: context.Background(), pool: pool, store: ledger.New(pool, nil),
		runbooks: runbook.NewStore(pool), clock: &clock{t: start.Add(-2 * time.Hour)}, logs: &logs{}}
	t.Cleanup(f.store.Close)
	f.sched = f.newScheduler(0)
	return f
}

// newScheduler is another scheduler instance on the same database and clock
// (batch 0: the default).
func (f *fixture) newScheduler(batch int) *Scheduler {
	f.t.Helper()
	s, err := New(f.store, f.runbooks, Config{Service: process.Service{Logger: slog.New(f.logs)}, Now: f.clock.Now, Batch: batch})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// tick runs one round and fails the test on any error.
func (f *fixture) tick() {
	f.t.Helper()
	if err := f.sched.Tick(f.ctx); err != nil {
		f.t.Fatalf("tick at %s: %v", runbook.FormatTime(f.clock.Now()), err)
	}
	if n := f.sched.duplicates.Load(); n != 0 {
		f.t.Fatalf("%d events were decided twice", n)
	}
}

// spec describes a test runbook.
type spec struct {
	name      string // default "mailbox-move"
	version   int    // default 1
	init      bool   // one init step, create-endpoint
	pollInit  bool   // the init step is a poll step
	overdue   string // default rerun
	rerunInit bool
	phases    string // default threePhases
}

// threePhases: notify an hour before the start, migrate at the start (a poll
// step with a rollback, then a plain step), clean up a day after. Offsets
// count minutes before the start (seed 003), so "a day after" is -1440.
const threePhases = `phases:
  - name: notify
    offset_minutes: 60
    steps:
      - {name: send-notice, worker_id: mailer, function: send_email, params: {to: "{{ email }}", when: "{{ _batch_start_time }}"}}
  - name: migrate
    offset_minutes: 0
    steps:
      - name: start-move
        worker_id: exchange
        function: start_move
        params: {mailbox: "{{ email }}", target: "{{ target }}", batch: "{{ _batch_id }}", retries: 3}
        is_poll_step: true
        poll_interval_sec: 60
        poll_timeout_sec: 3600
        on_failure: undo
      - {name: finish-move, worker_id: exchange, function: finish_move, params: {mailbox: "{{ _member_key }}"}}
  - name: cleanup
    offset_minutes: -1440
    steps:
      - {name: archive, worker_id: exchange, function: archive, params: {mailbox: "{{ email }}"}}
rollbacks:
  undo:
    - {name: cancel-move, worker_id: exchange, function: cancel_move, params: {mailbox: "{{ email }}"}}
`

func (s spec) yaml() string {
	if s.name == "" {
		s.name = "mailbox-move"
	}
	if s.version == 0 {
		s.version = 1
	}
	if s.overdue == "" {
		s.overdue = runbook.OverdueRerun
	}
	if s.phases == "" {
		s.phases = threePhases
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nversion: %d\ndata_source: {columns: [email, target]}\noverdue_behavior: %s\nrerun_init: %v\n",
		s.name, s.version, s.overdue, s.rerunInit)
	if s.init {
		b.WriteString("init:\n  - name: create-endpoint\n    worker_id: exchange\n    function: create_endpoint\n")
		b.WriteString("    params: {batch: \"{{ _batch_id }}\", starts: \"{{ _batch_start_time }}\"}\n")
		if s.pollInit {
			b.WriteString("    is_poll_step: true\n    poll_interval_sec: 30\n    poll_timeout_sec: 600\n")
		}
	}
	b.WriteString(s.phases)
	return b.String()
}

func (f *fixture) apply(s spec) *runbook.StoredRunbook {
	f.t.Helper()
	rb, err := runbook.Parse("test.yaml", []byte(s.yaml()))
	if err != nil {
		f.t.Fatal(err)
	}
	sr, _, err := f.runbooks.Apply(f.ctx, rb, "test")
	if err != nil {
		f.t.Fatal(err)
	}
	return sr
}

// mbr is a member with both columns set.
func mbr(key string, batchTime time.Time) runbook.Member {
	return runbook.Member{Key: key, BatchTime: batchTime,
		Values: map[string]string{"email": key + "@contoso.com", "target": "db-" + key}}
}

// members are n members u01.. at batchTime.
func members(n int, batchTime time.Time) []runbook.Member {
	out := make([]runbook.Member, n)
	for i := range out {
		out[i] = mbr(fmt.Sprintf("u%02d", i+1), batchTime)
	}
	return out
}

// load replaces the member data of a version (the source returns exactly these).
func (f *fixture) load(name string, version int, rows []runbook.Member) {
	f.t.Helper()
	if _, err := f.runbooks.LoadMembers(f.ctx, name, version, rows, true); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// message is an outbox row of the scheduler.
type message struct {
	ID          string
	Destination string
	Kind        string
	ContentType string
	Properties  map[string]string
	Body        map[string]any
	Raw         []byte
}

// messages returns the outbox rows of an event type (every type: ""), in order.
func (f *fixture) messages(typ string) []message {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT message_id, destination, kind, content_type, properties, body FROM outbox
		WHERE $1 = '' OR properties->>'MessageType' = $1 ORDER BY id`, typ)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (message, error) {
		var m message
		if err := r.Scan(&m.ID, &m.Destination, &m.Kind, &m.ContentType, &m.Properties, &m.Raw); err != nil {
			return m, err
		}
		return m, json.Unmarshal(m.Raw, &m.Body)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// ids are the message ids of an event type, in order.
func (f *fixture) ids(typ string) []string {
	f.t.Helper()
	var out []string
	for _, m := range f.messages(typ) {
		out = append(out, m.ID)
	}
	return out
}

// count runs a count query.
func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// strs runs a query of one text column.
func (f *fixture) strs(sql string, args ...any) []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, sql, args...)
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// phaseRows are "version/phase status" of a batch's phase executions, by version and name.
func (f *fixture) phaseRows(batchID int64) []string {
	f.t.Helper()
	return f.strs(`SELECT runbook_version || '/' || phase_name || ' ' || status FROM phase_executions
		WHERE batch_id = $1 ORDER BY runbook_version, phase_name`, batchID)
}

// activate does what the orchestrator does when a batch's init steps succeeded.
func (f *fixture) activate(batchID int64) {
	f.t.Helper()
	f.exec(`UPDATE batches SET status = 'active' WHERE id = $1`, batchID)
}

func (f *fixture) batchID(at time.Time) int64 {
	f.t.Helper()
	var id int64
	if err := f.pool.QueryRow(f.ctx, `SELECT id FROM batches WHERE batch_start_time = $1`, at).Scan(&id); err != nil {
		f.t.Fatalf("batch at %s: %v", runbook.FormatTime(at), err)
	}
	return id
}

func equal[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

// The events a scheduler writes are what the orchestrator subscription
// receives: kind, topic, MessageType property and JSON content type.
func TestEventsGoToOrchestratorEventsWithTheirMessageType(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{init: true})
	f.load("mailbox-move", 1, members(2, start))
	f.tick()
	msgs := f.messages("")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want one batch-init", len(msgs))
	}
	m := msgs[0]
	if m.Destination != topology.TopicOrchestratorEvents || m.Kind != ledger.KindRunbookEvent ||
		m.ContentType != "application/json" || len(m.Properties) != 1 || m.Properties[topology.PropertyMessageType] != runbook.EventBatchInit ||
		m.Body["messageType"] != runbook.EventBatchInit {
		t.Fatalf("message %+v", m)
	}
}

func TestConfigValidateRefusesNegativeSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults are valid", Config{}, ""},
		{"negative tick", Config{Tick: -time.Second}, "Tick"},
		{"negative batch", Config{Batch: -1}, "Batch"},
		{"negative timeout", Config{QueryTimeout: -1}, "QueryTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.DatabaseURL = "postgres://x"
			tt.cfg.defaults()
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	var c Config
	c.defaults()
	if c.Tick != time.Second || c.Batch != 500 || c.Now == nil || c.QueryTimeout != 30*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}
