package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgcluster"
	"github.com/lucius-platform/lucius/tools/stack"
)

// runCondition names the measured stretch of a run in the cpuMeter.
const runCondition = "run"

// benchApp is the application_name of the client's own database
// connections, so that PostgreSQL's work for it is not counted as Lucius's.
const benchApp = "lucius-bench"

// costs measures what a run costs the machine: CPU-seconds per process
// (/proc: each of the suite's processes by its name, PostgreSQL's backends
// and helpers together, this client), and PostgreSQL's commits, statements
// (pg_stat_statements, loaded in the benchmark's cluster) and WAL bytes.
type costs struct {
	db           *pgxpool.Pool
	own          *ownQueries
	ownBefore    int64
	cpu          *cpuMeter
	before       pgCounters
	statementsOK bool
	// calls is each statement's calls and time at the start (pg_stat_statements).
	calls map[int64]statementCall
	// tables is each table's row writes at the start (pg_stat_user_tables).
	tables map[string]tableWrites
	// cluster and startLSN, with walBreakdown, break the run's WAL down
	// by relation (wal.go).
	cluster  *pgcluster.Cluster
	startLSN string
}

// walBreakdown (-wal) adds the run's WAL per job by relation to the report.
var walBreakdown bool

// pgCounters are the database's cumulative counters at one moment.
type pgCounters struct {
	commits, statements, walBytes, walFPIs int64
}

// ownQueries counts the bench client's own statements (each one an
// autocommit transaction) so they are not counted as Lucius's: install it
// as the client pool's tracer.
type ownQueries struct{ n atomic.Int64 }

func (o *ownQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	o.n.Add(1)
	return ctx
}

func (o *ownQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pgSettings loads pg_stat_statements into the benchmark's cluster.
var pgSettings = map[string]string{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}

func startCosts(ctx context.Context, db *pgxpool.Pool, own *ownQueries, s *stack.Stack) *costs {
	c := &costs{db: db, own: own, cpu: newCPUMeter(db), cluster: s.Cluster()}
	c.cpu.names = map[int]string{os.Getpid(): "bench client"}
	for _, name := range s.Names() {
		if pid := s.Process(name).Pid(); pid > 0 {
			c.cpu.names[pid] = name
		}
	}
	_, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	c.statementsOK = err == nil
	c.before = c.counters(ctx)
	if walBreakdown {
		db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&c.startLSN) //nolint:errcheck // no breakdown when unreadable
	}
	c.calls = c.statements(ctx)
	c.tables = c.tableWrites(ctx)
	c.ownBefore = own.n.Load()
	c.cpu.begin(ctx)
	return c
}

// statementCall is one statement's calls and text.
type statementCall struct {
	calls  int64
	execMS float64 // total execution time (pg_stat_statements.total_exec_time)
	query  string
}

// statements reads pg_stat_statements, by query id (none when not loaded).
func (c *costs) statements(ctx context.Context) map[int64]statementCall {
	out := map[int64]statementCall{}
	if !c.statementsOK {
		return out
	}
	rows, err := c.db.Query(ctx, `SELECT queryid, calls, total_exec_time, query FROM pg_stat_statements WHERE queryid IS NOT NULL`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var sc statementCall
		if rows.Scan(&id, &sc.calls, &sc.execMS, &sc.query) == nil {
			out[id] = sc
		}
	}
	return out
}

// topStatements prints the statements run most per job during the run,
// with the execution time they cost per job.
func (c *costs) topStatements(ctx context.Context, jobs, n int) {
	type row struct {
		perJob, msPerJob float64
		query            string
	}
	var rows []row
	var totalMS float64
	for id, sc := range c.statements(ctx) {
		if d := sc.calls - c.calls[id].calls; d > 0 && !benchStatement(sc.query) {
			q := strings.Join(strings.Fields(sc.query), " ")
			if len(q) > 100 {
				q = q[:100] + "…"
			}
			ms := (sc.execMS - c.calls[id].execMS) / float64(jobs)
			totalMS += ms
			rows = append(rows, row{float64(d) / float64(jobs), ms, q})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].perJob > rows[j].perJob })
	fmt.Printf("  statements run most, per job (calls, execution ms; all statements: %.2f ms per job):\n", totalMS)
	for _, r := range rows[:min(n, len(rows))] {
		fmt.Printf("    %6.2f %6.3f  %s\n", r.perJob, r.msPerJob, r.query)
	}
}

// tableWrites is a table's cumulative row writes (pg_stat_user_tables).
type tableWrites struct {
	inserts, updates, hotUpdates, deletes int64
}

func (c *costs) tableWrites(ctx context.Context) map[string]tableWrites {
	out := map[string]tableWrites{}
	rows, err := c.db.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var w tableWrites
		if rows.Scan(&name, &w.inserts, &w.updates, &w.hotUpdates, &w.deletes) == nil {
			out[name] = w
		}
	}
	return out
}

// topTables prints the row writes per job of the tables written most: an
// update that is not HOT also writes every index of the table.
func (c *costs) topTables(ctx context.Context, jobs int) {
	type row struct {
		name string
		d    tableWrites
	}
	var rows []row
	for name, w := range c.tableWrites(ctx) {
		b := c.tables[name]
		d := tableWrites{w.inserts - b.inserts, w.updates - b.updates, w.hotUpdates - b.hotUpdates, w.deletes - b.deletes}
		if d.inserts+d.updates+d.deletes > 0 {
			rows = append(rows, row{name, d})
		}
	}
	total := func(w tableWrites) int64 { return w.inserts + w.updates + w.deletes }
	sort.Slice(rows, func(i, j int) bool { return total(rows[i].d) > total(rows[j].d) })
	per := func(v int64) float64 { return float64(v) / float64(jobs) }
	fmt.Println("  row writes per job (inserts / updates, HOT share / deletes):")
	for _, r := range rows[:min(8, len(rows))] {
		hot := 0.0
		if r.d.updates > 0 {
			hot = 100 * float64(r.d.hotUpdates) / float64(r.d.updates)
		}
		fmt.Printf("    %-20s %5.2f / %5.2f, %3.0f%% HOT / %5.2f\n", r.name, per(r.d.inserts), per(r.d.updates), hot, per(r.d.deletes))
	}
}

func (c *costs) counters(ctx context.Context) pgCounters {
	var p pgCounters
	c.db.QueryRow(ctx, `SELECT sum(xact_commit)::bigint FROM pg_stat_database`).Scan(&p.commits)           //nolint:errcheck // 0 when unreadable
	c.db.QueryRow(ctx, `SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal`).Scan(&p.walBytes, &p.walFPIs) //nolint:errcheck
	if c.statementsOK {
		c.db.QueryRow(ctx, `SELECT sum(calls)::bigint FROM pg_stat_statements`).Scan(&p.statements) //nolint:errcheck
	}
	return p
}

// report stops the measurement and prints the costs of jobs jobs.
func (c *costs) report(ctx context.Context, jobs int) {
	c.cpu.end(ctx, runCondition)
	own := c.own.n.Load() - c.ownBefore // this client's statements: each also a commit
	after := c.counters(ctx)
	if jobs == 0 {
		return
	}
	after.commits -= own
	after.statements -= own
	per := func(v int64) float64 { return float64(v) / float64(jobs) }
	fmt.Printf("\n  PostgreSQL per job: %.1f commits, %s statements, %.1f KiB WAL (%.1f full-page images)\n", per(after.commits-c.before.commits),
		map[bool]string{true: fmt.Sprintf("%.1f", per(after.statements-c.before.statements)), false: "n/a (pg_stat_statements not loaded)"}[c.statementsOK],
		per(after.walBytes-c.before.walBytes)/1024, per(after.walFPIs-c.before.walFPIs))
	const hz = 100.0 // USER_HZ
	type part struct {
		name string
		secs float64
	}
	var parts []part
	var postgres, total float64
	pgServed := map[string]float64{}
	var client float64
	for name, j := range c.cpu.parts[runCondition] {
		secs := j / hz
		switch {
		case name == "bench client" || name == "pg:"+benchApp:
			client += secs // not Lucius: reported apart
			continue
		case strings.HasPrefix(name, "pg:") || name == "postgres":
			postgres += secs
			served := strings.TrimPrefix(name, "pg:")
			if i := strings.LastIndexByte(served, '-'); i > 0 && strings.HasPrefix(served, "lucius-bus-listener") {
				served = served[:i] // one line for every process's bus listener
			}
			pgServed[served] += secs
		case c.isSuite(name):
			parts = append(parts, part{name, secs})
		default:
			continue // not the suite's: other work on the machine
		}
		total += secs
	}
	parts = append(parts, part{"postgres", postgres})
	sort.Slice(parts, func(i, j int) bool { return parts[i].secs > parts[j].secs })
	var pgParts []string
	k := float64(jobs) / 1000
	for name, secs := range pgServed {
		if secs/k >= 0.05 {
			pgParts = append(pgParts, fmt.Sprintf("%s %.2f", name, secs/k))
		}
	}
	sort.Strings(pgParts)
	fmt.Printf("  CPU-seconds per 1,000 jobs (%s of wall time; machine busy %.2f cores):\n",
		c.cpu.span[runCondition].Round(1e6), c.cpu.busy[runCondition]/hz/c.cpu.span[runCondition].Seconds())
	for _, p := range parts {
		fmt.Printf("    %-26s %7.2f\n", p.name, p.secs/k)
	}
	fmt.Printf("    %-26s %7.2f\n", "total (Lucius + PostgreSQL)", total/k)
	fmt.Printf("    %-26s %7.2f\n", "(the bench client, apart)", client/k)
	fmt.Printf("  PostgreSQL's share by whom it served (CPU-s per 1,000 jobs): %s\n", strings.Join(pgParts, ", "))
	if c.statementsOK {
		c.topStatements(ctx, jobs, 15)
	}
	c.topTables(ctx, jobs)
	if c.cluster != nil && c.startLSN != "" {
		var end string
		if err := c.db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&end); err == nil {
			if err := reportWAL(ctx, c.db, c.cluster, c.startLSN, end, jobs, 12); err != nil {
				fmt.Printf("  WAL by relation: %v\n", err)
			}
		}
	}
}

// isSuite reports whether name is one of the stack's processes.
func (c *costs) isSuite(name string) bool {
	for _, n := range c.cpu.names {
		if n == name {
			return true
		}
	}
	return false
}

// benchStatement recognizes this client's own statements: its completion
// polls and the counters it reads.
func benchStatement(query string) bool {
	return strings.Contains(query, "completed_at IS NOT NULL") && strings.Contains(query, "job_id = ANY") ||
		strings.Contains(query, "pg_stat_")
}
