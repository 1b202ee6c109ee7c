package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/core/runbook"
)

// polls emits poll-check for the step and init executions whose poll
// interval has passed since the orchestrator last polled them, at most Batch
// of each per tick. The claim stamps poll_checked_at, so a row gets one
// poll-check per last_polled_at: the next comes after the orchestrator polled
// again and moved last_polled_at.
func (s *Scheduler) polls(ctx context.Context, now time.Time) error {
	var errs []error
	for _, t := range []struct{ table, query string }{
		{runbook.TableSteps, sqlClaimStepPolls},
		{runbook.TableInit, sqlClaimInitPolls},
	} {
		if err := s.pollTable(ctx, now, t.table, t.query); err != nil {
			err = fmt.Errorf("poll checks (%s): %w", t.table, err)
			s.failed(ctx, stagePolls, err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pollRow is a claimed polling row.
type pollRow struct {
	id          int64
	stepName    string
	pollCount   int
	batchID     int64
	runbookName string
	version     int
}

func (s *Scheduler) pollTable(ctx context.Context, now time.Time, table, query string) error {
	return s.inTx(ctx, "poll check", func(ctx context.Context, q pgx.Tx, em *emitter) error {
		rows, err := q.Query(ctx, query, now, s.batch)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pollRow, error) {
			var p pollRow
			err := r.Scan(&p.id, &p.stepName, &p.pollCount, &p.batchID, &p.runbookName, &p.version)
			return p, err
		})
		if err != nil {
			return err
		}
		slices.SortFunc(due, func(a, b pollRow) int { return cmp.Compare(a.id, b.id) })
		for _, p := range due {
			ev := runbook.PollCheckEvent{MessageType: runbook.EventPollCheck, RunbookName: p.runbookName, RunbookVersion: p.version,
				BatchID: p.batchID, StepName: p.stepName, PollCount: p.pollCount + 1}
			if table == runbook.TableInit {
				ev.InitExecutionID = ptr(p.id)
			} else {
				ev.StepExecutionID = ptr(p.id)
			}
			if err := em.add(runbook.EventPollCheck, pollCheckID(table, p.id, ev.PollCount), ev); err != nil {
				return err
			}
			em.debug(runbook.EventPollCheck, slog.String(keyRunbook, p.runbookName), slog.Int(keyRunbookVersion, p.version),
				slog.Int64(keyBatchID, p.batchID), slog.String("table", table), slog.Int64("execution_id", p.id),
				slog.String("step", p.stepName), slog.Int("poll_count", ev.PollCount))
		}
		return nil
	})
}
