package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgcluster"
)

// walByRelation breaks the WAL a run wrote down by the relation each record
// changed, with the full-page images among it: where WAL grows (a full-page
// image is a whole 8 KiB page, written at a page's first change after each
// checkpoint) is where to look when WAL per job grows. It reads the run's
// WAL with pg_waldump, so the WAL between from and to must still be on disk
// (max_wal_size keeps it for a benchmark's run).
type walByRelation struct {
	bytes, fpis int64
	records     int64
}

// walRecord matches a pg_waldump record line's total length and its first
// block reference; " FPW" marks each full-page image among its references.
var walRecord = regexp.MustCompile(`^rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+),.*?desc: (\S+)(?:.*?blkref #0: rel \d+/\d+/(\d+))?`)

// reportWAL prints the run's WAL per job by relation (the top n), from the
// LSN range [from, to).
func reportWAL(ctx context.Context, db *pgxpool.Pool, cluster *pgcluster.Cluster, from, to string, jobs, n int) error {
	names := map[string]string{}
	rows, err := db.Query(ctx, `SELECT pg_relation_filenode(oid)::text, relname FROM pg_class WHERE pg_relation_filenode(oid) IS NOT NULL`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var node, name string
		if rows.Scan(&node, &name) == nil {
			names[node] = name
		}
	}
	rows.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.BinDir(), "pg_waldump"),
		"-p", filepath.Join(cluster.DataDir(), "pg_wal"), "-s", from, "-e", to)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	by := map[string]*walByRelation{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := walRecord.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := m[1] + " " + m[3] // resource manager and record kind when no relation
		if m[4] != "" {
			key = names[m[4]]
			if key == "" {
				key = "relation " + m[4]
			}
		}
		size, _ := strconv.ParseInt(m[2], 10, 64)
		w := by[key]
		if w == nil {
			w = &walByRelation{}
			by[key] = w
		}
		w.bytes += size
		w.records++
		w.fpis += int64(strings.Count(line, " FPW"))
	}
	// pg_waldump ends with an error at the end of the written WAL; the
	// records read up to there are what counts.
	_ = cmd.Wait()
	type row struct {
		name string
		w    *walByRelation
	}
	var all []row
	var total int64
	for name, w := range by {
		all = append(all, row{name, w})
		total += w.bytes
	}
	sort.Slice(all, func(i, j int) bool { return all[i].w.bytes > all[j].w.bytes })
	per := func(v int64) float64 { return float64(v) / float64(jobs) }
	fmt.Printf("  WAL per job by relation (pg_waldump %s…%s, %.1f KiB per job read; KiB, records, full-page images):\n", from, to, per(total)/1024)
	for _, r := range all[:min(n, len(all))] {
		fmt.Printf("    %-34s %6.1f KiB %6.1f rec %5.2f FPI\n", r.name, per(r.w.bytes)/1024, per(r.w.records), per(r.w.fpis))
	}
	return nil
}
