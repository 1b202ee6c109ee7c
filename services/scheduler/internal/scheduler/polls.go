package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// polls emits poll-check for the step and init executions whose poll
// interval has passed since the orchestrator last polled them, at most Batch
// of each per tick. The claim stamps poll_checked_at, so a row gets one
// poll-check per last_polled_at: the next comes after the orchestrator polled
// again and moved last_polled_at.
func (s *Scheduler) polls(ctx context.Context, now time.Time) error {
	var errs []error
	for _, table := range []string{runbook.TableSteps, runbook.TableInit} {
		if err := s.pollTable(ctx, now, table); err != nil {
			err = fmt.Errorf("poll checks (%s): %w", table, err)
			s.failed(ctx, stagePolls, err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Scheduler) pollTable(ctx context.Context, now time.Time, table string) error {
	return s.inTx(ctx, "poll check", func(ctx context.Context, q *runbook.Schedule, em *emitter) error {
		due, err := q.ClaimPolls(ctx, table, now, s.batch)
		if err != nil {
			return err
		}
		for _, p := range due {
			ev := runbook.PollCheckEvent{MessageType: runbook.EventPollCheck, RunbookName: p.RunbookName, RunbookVersion: p.Version,
				BatchID: p.BatchID, StepName: p.StepName, PollCount: p.PollCount + 1}
			if table == runbook.TableInit {
				ev.InitExecutionID = ptr(p.ID)
			} else {
				ev.StepExecutionID = ptr(p.ID)
			}
			if err := em.add(runbook.EventPollCheck, pollCheckID(table, p.ID, ev.PollCount), ev); err != nil {
				return err
			}
			em.debug(runbook.EventPollCheck, slog.String(keyRunbook, p.RunbookName), slog.Int(keyRunbookVersion, p.Version),
				slog.Int64(keyBatchID, p.BatchID), slog.String("table", table), slog.Int64("execution_id", p.ID),
				slog.String("step", p.StepName), slog.Int("poll_count", ev.PollCount))
		}
		return nil
	})
}
