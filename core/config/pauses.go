package config

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pause scopes: what a pause stops.
const (
	PauseGlobal   = "global"
	PauseTenant   = "tenant"
	PauseLane     = "lane"
	PauseWorkflow = "workflow"
)

// Pause stops the dispatch of new steps of the jobs it matches (in-flight
// steps finish); with RefuseSubmits the gateway refuses new commands too.
type Pause struct {
	Scope, Key    string
	Reason        string
	RefuseSubmits bool
	PausedBy      string
	PausedAt      time.Time
	Revision      int64
}

// Label names a pause for reasons and logs, e.g. "tenant acme".
func (p Pause) Label() string {
	if p.Scope == PauseGlobal {
		return "all work"
	}
	return p.Scope + " " + p.Key
}

// ErrNoPause means: resume names nothing paused.
var ErrNoPause = errors.New("not paused")

// Paused returns the pause that holds a job of tenant in lane running
// workflow, if any (the global one first, then tenant, lane, workflow).
func (s *Snapshot) Paused(tenant, lane, workflow string) (Pause, bool) {
	if s == nil {
		return Pause{}, false
	}
	for _, k := range [][2]string{{PauseGlobal, ""}, {PauseTenant, tenant}, {PauseLane, lane}, {PauseWorkflow, workflow}} {
		for _, p := range s.Pauses {
			if p.Scope == k[0] && p.Key == k[1] {
				return p, true
			}
		}
	}
	return Pause{}, false
}

// NormalizePauseKey checks a pause's scope and key and normalizes the key
// as jobs carry it (tenants lower-case, lanes as routing names them).
func NormalizePauseKey(scope, key string) (string, error) {
	key = strings.TrimSpace(key)
	switch scope {
	case PauseGlobal:
		if key != "" {
			return "", errors.New("a global pause has no key")
		}
		return "", nil
	case PauseTenant:
		key = strings.ToLower(key) // as tenants are normalized
	case PauseLane:
		key = strings.ToUpper(key) // as jobs carry it: DEFAULT, BURST
	case PauseWorkflow:
	default:
		return "", fmt.Errorf("unknown pause scope %q", scope)
	}
	if key == "" {
		return "", fmt.Errorf("a %s pause names its %s", scope, scope)
	}
	return key, nil
}

// Pause stores (or replaces) a pause, by p.PausedBy.
func (s *Store) Pause(ctx context.Context, p Pause) (Pause, error) {
	err := s.change(ctx, change{scope: "pause:" + p.Scope + ":" + p.Key, action: "PAUSE", by: p.PausedBy}, func(tx pgx.Tx, rev int64) error {
		return tx.QueryRow(ctx, `INSERT INTO config_pauses (scope, key, reason, refuse_submits, paused_by, revision)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, key) DO UPDATE SET reason = excluded.reason, refuse_submits = excluded.refuse_submits,
			paused_by = excluded.paused_by, paused_at = now(), revision = excluded.revision
		RETURNING paused_at, revision`, p.Scope, p.Key, p.Reason, p.RefuseSubmits, p.PausedBy, rev).Scan(&p.PausedAt, &p.Revision)
	})
	return p, err
}

// Resume removes a pause, by who; ErrNoPause when there is none.
func (s *Store) Resume(ctx context.Context, scope, key, by string) error {
	return s.change(ctx, change{scope: "pause:" + scope + ":" + key, action: "RESUME", by: by}, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, `DELETE FROM config_pauses WHERE scope = $1 AND key = $2`, scope, key)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("%s %q: %w", scope, key, ErrNoPause)
		}
		return err
	})
}

func readPauses(ctx context.Context, tx pgx.Tx) ([]Pause, error) {
	rows, err := tx.Query(ctx, `SELECT scope, key, reason, refuse_submits, paused_by, paused_at, revision
	FROM config_pauses ORDER BY scope, key`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Pause, error) {
		var p Pause
		return p, row.Scan(&p.Scope, &p.Key, &p.Reason, &p.RefuseSubmits, &p.PausedBy, &p.PausedAt, &p.Revision)
	})
}

// Paused answers from the current snapshot whether a job of tenant in lane
// running workflow is paused, with a description for the step that waits
// (engine.Pauses).
func (w *Watcher) Paused(tenant, lane, workflow string) (string, bool) {
	p, ok := w.Current().Paused(tenant, lane, workflow)
	if !ok {
		return "", false
	}
	what := p.Label() + " paused by " + p.PausedBy
	if p.Reason != "" {
		what += " (" + p.Reason + ")"
	}
	return what, true
}

// PauseSet lists what the snapshot's pauses hold.
func (s *Snapshot) PauseSet() (global bool, tenants, lanes, workflows []string) {
	if s == nil {
		return false, nil, nil, nil
	}
	for _, p := range s.Pauses {
		switch p.Scope {
		case PauseGlobal:
			global = true
		case PauseTenant:
			tenants = append(tenants, p.Key)
		case PauseLane:
			lanes = append(lanes, p.Key)
		case PauseWorkflow:
			workflows = append(workflows, p.Key)
		}
	}
	return global, tenants, lanes, workflows
}
