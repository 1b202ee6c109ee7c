package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// historyTemplate is how many real jobs the history is copied from.
const historyTemplate = 500

// historySpan is how far back the copied history reaches: copies are spread
// over it, oldest first, so time-ordered indexes see history as the past.
const historySpan = 7 * 24 * time.Hour

// historyTables are the tables a finished job leaves rows in, parents first
// (foreign keys). worker_executions is the worker store's table.
var historyTables = []string{"requests", "jobs", "steps", "attempts", "job_events", "worker_executions"}

// seedHistory fills the ledger with n finished jobs before a run: it runs
// historyTemplate real jobs through the suite, copies their rows in SQL
// (each copy's job ids suffixed, its timestamps moved into the past), then
// vacuums, analyzes and checkpoints, so the measured run starts from a
// settled database that holds a long history.
func seedHistory(ctx context.Context, pool *pgxpool.Pool, sub *submitter, n int) error {
	start := time.Now()
	template := min(n, historyTemplate)
	warm := *sub
	warm.rate, warm.ended = 0, nil
	fmt.Printf("history: running %d template jobs…\n", template)
	ids, _, failed := warm.submit(ctx, template, "history")
	if failed > 0 {
		return fmt.Errorf("%d template jobs were refused", failed)
	}
	if err := waitFinished(ctx, pool, ids, 5*time.Minute); err != nil {
		return err
	}
	copies := (n - template + template - 1) / template
	inserts := make([]string, 0, len(historyTables))
	for _, table := range historyTables {
		q, err := copyStatement(ctx, pool, table)
		if err != nil {
			return err
		}
		if q != "" {
			inserts = append(inserts, q)
		}
	}
	const perTx = 20 // copies per transaction: 10,000 jobs
	for from := 1; from <= copies; from += perTx {
		to := min(from+perTx-1, copies)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
			for _, q := range inserts {
				if _, err := tx.Exec(ctx, q, ids, from, to, copies, historySpan.Seconds()); err != nil {
					return fmt.Errorf("%s: %w", q[:strings.Index(q, "(")], err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if done := to * template; done/100000 != (done-perTx*template)/100000 || to == copies {
			fmt.Printf("history: %d jobs copied (%s)\n", done, time.Since(start).Round(time.Second))
		}
	}
	for _, table := range historyTables {
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{table}.Sanitize()); err != nil && !missingTable(err) {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	var jobs int64
	var size string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs), pg_size_pretty(pg_database_size(current_database()))`).Scan(&jobs, &size); err != nil {
		return err
	}
	fmt.Printf("history: %d finished jobs in the ledger, database %s, seeded in %s; largest tables:\n", jobs, size, time.Since(start).Round(time.Second))
	rows, err := pool.Query(ctx, `SELECT relname, pg_size_pretty(pg_total_relation_size(oid)), pg_size_pretty(pg_indexes_size(oid))
		FROM pg_class WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace
		ORDER BY pg_total_relation_size(oid) DESC LIMIT 8`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name, total, indexes string
		if err := rows.Scan(&name, &total, &indexes); err != nil {
			return err
		}
		fmt.Printf("  %-20s %10s (indexes %s)\n", name, total, indexes)
	}
	return rows.Err()
}

// copyStatement is the INSERT … SELECT that copies table's rows of the
// template jobs ($1) once per g in [$2, $3] of $4 copies, spread over $5
// seconds before the templates; "" when the table does not exist.
func copyStatement(ctx context.Context, pool *pgxpool.Pool, table string) (string, error) {
	rows, err := pool.Query(ctx, `SELECT column_name, data_type, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1
		ORDER BY ordinal_position`, table)
	if err != nil {
		return "", err
	}
	var cols, exprs []string
	for rows.Next() {
		var name, typ, def string
		if err := rows.Scan(&name, &typ, &def); err != nil {
			return "", err
		}
		if strings.HasPrefix(def, "nextval(") {
			continue // a serial id: each copy takes its own
		}
		col := pgx.Identifier{name}.Sanitize()
		expr := col
		switch {
		case name == "job_id" || name == "idempotency_key" || name == "request_key":
			expr = col + " || '~h' || g"
		case name == "replay_of":
			expr = "CASE WHEN " + col + " = '' THEN '' ELSE " + col + " || '~h' || g END"
		case typ == "timestamp with time zone":
			expr = col + " - make_interval(secs => $5::float8 * ($4::int + 1 - g) / $4::int)"
		}
		cols = append(cols, col)
		exprs = append(exprs, expr)
	}
	if err := rows.Err(); err != nil || len(cols) == 0 {
		return "", err
	}
	t := pgx.Identifier{table}.Sanitize()
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s CROSS JOIN generate_series($2::int, $3::int) AS g WHERE job_id = ANY($1)",
		t, strings.Join(cols, ", "), strings.Join(exprs, ", "), t), nil
}

func missingTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "does not exist")
}
