// Package database opens the PostgreSQL pool a Lucius process uses and brings
// the schema it needs up to date (migrations are safe when processes start
// together).
package database

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lucius-platform/lucius/base/migrate"
)

// Open connects a pool of at most maxConns connections (pgx's default when 0)
// and applies the migration sets in order.
func Open(ctx context.Context, url string, maxConns int32, sets ...migrate.Set) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// A process frozen inside a transaction (SIGSTOP, a stuck goroutine) must not
	// hold row locks forever: the server aborts it, and its late commit fails.
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "15s"
	}
	// Name the connections after the process (unless the URL names them), so
	// that pg_stat_activity says which service holds a connection or a lock.
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = filepath.Base(os.Args[0])
	}
	// Queries made under a recorded span become its children (db.system
	// postgresql, the statement, rows affected); otelpgx also reports every
	// query's duration (db.client.operation.duration). Telemetry must be set
	// up first: the tracer takes the global providers now.
	var tracer pgx.QueryTracer = otelpgx.NewTracer()
	if cfg.ConnConfig.Tracer != nil {
		tracer = multitracer.New(cfg.ConnConfig.Tracer, tracer)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	if err := waitReachable(ctx, pool, StartupWait); err != nil {
		pool.Close()
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	err = migrate.Apply(ctx, db, sets...)
	db.Close() // the pool stays open
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// StartupWait is how long Open waits for the database at start: a process
// started while PostgreSQL restarts (a deploy, a failover) waits for it
// instead of exiting.
var StartupWait = time.Minute

func waitReachable(ctx context.Context, pool *pgxpool.Pool, wait time.Duration) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 2*time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, pool.Ping(ctx) },
		backoff.WithBackOff(b), backoff.WithMaxElapsedTime(wait))
	if err != nil {
		return fmt.Errorf("database not reachable after %s: %w", wait, err)
	}
	return nil
}
