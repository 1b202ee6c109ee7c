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
	// calls is each statement's call count at the start (pg_stat_statements).
	calls map[int64]int64
}

// pgCounters are the database's cumulative counters at one moment.
type pgCounters struct {
	commits, statements, walBytes int64
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
	c := &costs{db: db, own: own, cpu: newCPUMeter(db)}
	c.cpu.names = map[int]string{os.Getpid(): "bench client"}
	for _, name := range s.Names() {
		if pid := s.Process(name).Pid(); pid > 0 {
			c.cpu.names[pid] = name
		}
	}
	_, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	c.statementsOK = err == nil
	c.before = c.counters(ctx)
	c.calls = c.statementCalls(ctx)
	c.ownBefore = own.n.Load()
	c.cpu.begin(ctx)
	return c
}

// statementCall is one statement's calls and text.
type statementCall struct {
	calls int64
	query string
}

func (c *costs) statementCalls(ctx context.Context) map[int64]int64 {
	out := map[int64]int64{}
	for id, sc := range c.statements(ctx) {
		out[id] = sc.calls
	}
	return out
}

// statements reads pg_stat_statements, by query id (none when not loaded).
func (c *costs) statements(ctx context.Context) map[int64]statementCall {
	out := map[int64]statementCall{}
	if !c.statementsOK {
		return out
	}
	rows, err := c.db.Query(ctx, `SELECT queryid, calls, query FROM pg_stat_statements WHERE queryid IS NOT NULL`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var sc statementCall
		if rows.Scan(&id, &sc.calls, &sc.query) == nil {
			out[id] = sc
		}
	}
	return out
}

// topStatements prints the statements run most per job during the run.
func (c *costs) topStatements(ctx context.Context, jobs, n int) {
	type row struct {
		perJob float64
		query  string
	}
	var rows []row
	for id, sc := range c.statements(ctx) {
		if d := sc.calls - c.calls[id]; d > 0 && !benchStatement(sc.query) {
			q := strings.Join(strings.Fields(sc.query), " ")
			if len(q) > 110 {
				q = q[:110] + "…"
			}
			rows = append(rows, row{float64(d) / float64(jobs), q})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].perJob > rows[j].perJob })
	fmt.Println("  statements run most, per job:")
	for _, r := range rows[:min(n, len(rows))] {
		fmt.Printf("    %6.2f  %s\n", r.perJob, r.query)
	}
}

func (c *costs) counters(ctx context.Context) pgCounters {
	var p pgCounters
	c.db.QueryRow(ctx, `SELECT sum(xact_commit)::bigint FROM pg_stat_database`).Scan(&p.commits) //nolint:errcheck // 0 when unreadable
	c.db.QueryRow(ctx, `SELECT wal_bytes::bigint FROM pg_stat_wal`).Scan(&p.walBytes)            //nolint:errcheck
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
	fmt.Printf("\n  PostgreSQL per job: %.1f commits, %s statements, %.1f KiB WAL\n", per(after.commits-c.before.commits),
		map[bool]string{true: fmt.Sprintf("%.1f", per(after.statements-c.before.statements)), false: "n/a (pg_stat_statements not loaded)"}[c.statementsOK],
		per(after.walBytes-c.before.walBytes)/1024)
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
	for name, secs := range pgServed {
		if secs >= 0.05 {
			pgParts = append(pgParts, fmt.Sprintf("%s %.1f", name, secs))
		}
	}
	sort.Strings(pgParts)
	k := float64(jobs) / 1000
	fmt.Printf("  CPU-seconds per 1,000 jobs (%s of wall time; machine busy %.2f cores):\n",
		c.cpu.span[runCondition].Round(1e6), c.cpu.busy[runCondition]/hz/c.cpu.span[runCondition].Seconds())
	for _, p := range parts {
		fmt.Printf("    %-26s %7.2f\n", p.name, p.secs/k)
	}
	fmt.Printf("    %-26s %7.2f\n", "total (Lucius + PostgreSQL)", total/k)
	fmt.Printf("    %-26s %7.2f\n", "(the bench client, apart)", client/k)
	fmt.Printf("  PostgreSQL CPU-seconds by whom it served: %s\n", strings.Join(pgParts, ", "))
	if c.statementsOK {
		c.topStatements(ctx, jobs, 15)
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
