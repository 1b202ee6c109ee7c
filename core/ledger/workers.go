package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkerHandler is a handler a worker announced.
type WorkerHandler struct {
	Name        string `json:"name"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
}

// WorkerInstance is one worker as it last announced itself.
type WorkerInstance struct {
	Service, InstanceID, Version string
	Handlers                     []WorkerHandler
	StartedAt, LastSeenAt        time.Time
}

// RegisterWorker records a worker instance's announcement (or heartbeat)
// and adds its handlers to the catalog, in one transaction: a handler
// another service owns fails it all with ErrHandlerConflict.
func (s *Store) RegisterWorker(ctx context.Context, w WorkerInstance) error {
	handlers, err := json.Marshal(w.Handlers)
	if err != nil {
		return err
	}
	return s.InTx(ctx, func(tx *Tx) error {
		for _, h := range w.Handlers {
			var owner string
			err := tx.tx.QueryRow(ctx, sqlPutHandler, h.Name, w.Service, h.Description).Scan(&owner)
			if isNoRows(err) {
				return fmt.Errorf("handler %s: %w", h.Name, ErrHandlerConflict)
			}
			if err != nil {
				return fmt.Errorf("register handler %s: %w", h.Name, err)
			}
		}
		_, err := tx.tx.Exec(ctx, `INSERT INTO worker_instances (service, instance_id, version, handlers)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (service, instance_id) DO UPDATE SET version = excluded.version, handlers = excluded.handlers,
			last_seen_at = now()`, w.Service, w.InstanceID, w.Version, handlers)
		if err != nil {
			return fmt.Errorf("register worker %s/%s: %w", w.Service, w.InstanceID, err)
		}
		return nil
	})
}

// WorkerFilter selects worker instances: those seen within Since, of
// Service (all when empty), of up to Services services named after After.
type WorkerFilter struct {
	Service, After string
	Services       int
	Since          time.Duration
}

// WorkerInstances lists the instances f selects, by service and instance.
func (s *Store) WorkerInstances(ctx context.Context, f WorkerFilter) ([]WorkerInstance, error) {
	rows, err := s.pool.Query(ctx, `WITH seen AS (
		SELECT * FROM worker_instances
		WHERE ($1 = '' OR service = $1) AND service > $2 AND last_seen_at > now() - $3::bigint * interval '1 microsecond'),
	services AS (SELECT DISTINCT service FROM seen ORDER BY service LIMIT $4)
	SELECT service, instance_id, version, handlers, started_at, last_seen_at
	FROM seen JOIN services USING (service) ORDER BY service, instance_id`, f.Service, f.After, f.Since.Microseconds(), f.Services)
	if err != nil {
		return nil, fmt.Errorf("worker instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkerInstance, error) {
		var w WorkerInstance
		var handlers []byte
		if err := row.Scan(&w.Service, &w.InstanceID, &w.Version, &handlers, &w.StartedAt, &w.LastSeenAt); err != nil {
			return w, err
		}
		return w, json.Unmarshal(handlers, &w.Handlers)
	})
	if err != nil {
		return nil, fmt.Errorf("worker instances: %w", err)
	}
	return out, nil
}
