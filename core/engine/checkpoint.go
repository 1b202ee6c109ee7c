package engine

import (
	"context"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Checkpoint is a checkpoint a worker saved of its step's progress.
type Checkpoint struct {
	Name      string
	URI       string
	SizeBytes int64
	SHA256    string
	// SavedAt is when the worker saved it; zero when it did not say.
	SavedAt time.Time
}

// CheckpointResult is the answer to RecordCheckpoint.
type CheckpointResult struct {
	Outcome    Outcome
	StepStatus ledger.StepStatus
}

// RecordCheckpoint appends a CHECKPOINT_SAVED event for the current attempt
// of a step (seed 001 §11): the worker saved a checkpoint of the step's
// progress in the job's workspace. It changes no state. A checkpoint of an
// attempt that no longer owns the step is rejected like any stale callback.
func (e *Engine) RecordCheckpoint(ctx context.Context, k CallbackKey, c Checkpoint) (CheckpointResult, error) {
	key := callbackKey{k, "CHECKPOINT"}
	var out CheckpointResult
	err := e.callbackTx(ctx, key, func(tx *ledger.Tx) error {
		job, step, attempt, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus = step.Status
		if outcome, rejected := checkCallback(tx, job, step, key, false); rejected {
			out.Outcome = outcome
			return nil
		}
		if attempt == nil {
			return key.attemptNotFound()
		}
		data := map[string]any{"checkpoint_name": c.Name, "uri": c.URI,
			"size_bytes": c.SizeBytes, "sha256": c.SHA256, "worker_id": k.WorkerID}
		if !c.SavedAt.IsZero() {
			data["save_time"] = c.SavedAt.UTC().Format(time.RFC3339Nano)
		}
		// A worker retries a call whose answer it lost: the same save (name,
		// content, time) is one event.
		seen, err := tx.HasAttemptEvent(ctx, ledger.AttemptKey{JobID: key.JobID, StepID: key.StepID, AttemptNo: key.AttemptNo},
			ledger.EventCheckpointSaved, map[string]any{"checkpoint_name": data["checkpoint_name"], "sha256": data["sha256"],
				"save_time": data["save_time"]})
		if err != nil {
			return err
		}
		out.Outcome = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED
		if seen {
			out.Outcome = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE
			return nil
		}
		tx.Append(ledger.Event{JobID: key.JobID, StepID: key.StepID, AttemptNo: key.AttemptNo, Type: ledger.EventCheckpointSaved,
			Data: data})
		return nil
	})
	return out, err
}
