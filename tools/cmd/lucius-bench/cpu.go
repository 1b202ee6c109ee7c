package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuMeter says where the machine's CPU went while a condition held: the
// busy share of the whole machine (/proc/stat) and each part's share, a part
// being a process name (truncated by Linux to 15 characters) or, for a
// PostgreSQL backend, the application_name of the service it serves
// (database.Open sets it) or its backend type. Linux only; elsewhere it
// reports nothing.
type cpuMeter struct {
	db *pgxpool.Pool
	// names labels processes by pid (the stack's, e.g. orchestrator-2),
	// before their command names.
	names map[int]string
	start cpuSnapshot
	busy  map[string]float64            // condition → busy jiffies
	total map[string]float64            // condition → all jiffies
	parts map[string]map[string]float64 // condition → part → jiffies
	span  map[string]time.Duration      // condition → time measured
}

type cpuSnapshot struct {
	at          time.Time
	busy, total uint64
	pids        map[int]pidTime
}

type pidTime struct {
	part    string
	jiffies uint64
}

func newCPUMeter(db *pgxpool.Pool) *cpuMeter {
	return &cpuMeter{db: db, busy: map[string]float64{}, total: map[string]float64{},
		parts: map[string]map[string]float64{}, span: map[string]time.Duration{}}
}

// begin starts a measured stretch; end attributes it to a condition.
func (m *cpuMeter) begin(ctx context.Context) { m.start = m.snapshot(ctx) }

func (m *cpuMeter) end(ctx context.Context, condition string) {
	now := m.snapshot(ctx)
	if m.start.total == 0 || now.total == 0 {
		return
	}
	m.busy[condition] += float64(now.busy - m.start.busy)
	m.total[condition] += float64(now.total - m.start.total)
	m.span[condition] += now.at.Sub(m.start.at)
	if m.parts[condition] == nil {
		m.parts[condition] = map[string]float64{}
	}
	for pid, t := range now.pids {
		before := m.start.pids[pid] // a process started meanwhile counts from 0
		if t.jiffies >= before.jiffies {
			m.parts[condition][t.part] += float64(t.jiffies - before.jiffies)
		}
	}
}

// report prints, per condition, the cores busy and the parts that used the
// most of them.
func (m *cpuMeter) report(conditions ...string) {
	if len(m.span) == 0 {
		return
	}
	hz := 100.0 // USER_HZ: jiffies per second, 100 on every Linux ABI Go supports
	fmt.Println("  CPU while each condition held, in cores busy (machine, then the busiest parts):")
	for _, c := range conditions {
		secs := m.span[c].Seconds()
		if secs == 0 || m.total[c] == 0 {
			continue
		}
		cores := m.total[c] / hz / secs // jiffies of all cores per second of wall time
		type part struct {
			name  string
			cores float64
		}
		var parts []part
		for name, j := range m.parts[c] {
			parts = append(parts, part{name, j / hz / secs})
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i].cores > parts[j].cores })
		var top []string
		for _, p := range parts[:min(len(parts), 8)] {
			top = append(top, fmt.Sprintf("%s %.2f", p.name, p.cores))
		}
		fmt.Printf("    %-9s %.2f of %.0f: %s\n", c, m.busy[c]/hz/secs, cores, strings.Join(top, ", "))
	}
}

func (m *cpuMeter) snapshot(ctx context.Context) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), pids: map[int]pidTime{}}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	for i, f := range strings.Fields(string(line))[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		if i < 8 { // user nice system idle iowait irq softirq steal (guest time is inside user)
			s.total += v
			if i != 3 && i != 4 {
				s.busy += v
			}
		}
	}
	backends := m.backendParts(ctx)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces, so
		// the fields are counted from its closing parenthesis.
		open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseUint(f[11], 10, 64)
		stime, _ := strconv.ParseUint(f[12], 10, 64)
		name := string(b[open+1 : close])
		if p, ok := backends[pid]; ok {
			name = "pg:" + p
		} else if n, ok := m.names[pid]; ok {
			name = n
		}
		s.pids[pid] = pidTime{part: name, jiffies: utime + stime}
	}
	return s
}

// backendParts names each PostgreSQL backend by whom it serves.
func (m *cpuMeter) backendParts(ctx context.Context) map[int]string {
	out := map[int]string{}
	rows, err := m.db.Query(ctx, `SELECT pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var name string
		if rows.Scan(&pid, &name) == nil {
			out[pid] = name
		}
	}
	return out
}
