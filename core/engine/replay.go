package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// ErrNotReplayable means: only a FAILED_FINAL job can be replayed.
var ErrNotReplayable = errors.New("only a FAILED_FINAL job can be replayed")

// ReplayJobID is the id of the n-th replay of jobID (n from 1), derived like
// the gateway's job ids (64 hex digits).
func ReplayJobID(jobID string, n int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("lucius/replay/v1\n%s\n%d", jobID, n)))
	return hex.EncodeToString(sum[:])
}

// Replay re-runs a FAILED_FINAL job as a new job (seed 004 §8): same request,
// same pinned workflow version and routing; the steps that succeeded keep
// their outputs and the failed ones run again with a new attempt. The new job
// is accepted like a submitted command (request row and orchestrator-jobs
// message in one transaction); the failed job and its dead letters point to it.
// Calling it again while that replay runs (or after it succeeded) returns it.
func Replay(ctx context.Context, store *ledger.Store, jobID, reason string, clock func() time.Time) (*ledger.Job, error) {
	if clock == nil {
		clock = time.Now
	}
	var newID string
	err := store.InTx(ctx, func(tx *ledger.Tx) error {
		req, _, err := tx.LockRequest(ctx, jobID)
		if err != nil {
			return err
		}
		job, err := tx.LockJob(ctx, jobID)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("job %s has not started: %w", jobID, ErrNotReplayable)
		}
		if err != nil {
			return err
		}
		if job.Status != ledger.JobFailedFinal {
			return fmt.Errorf("job %s is %s: %w", jobID, job.Status, ErrNotReplayable)
		}
		replays, err := tx.Replays(ctx, jobID)
		if err != nil {
			return err
		}
		if n := len(replays); n > 0 {
			// A replay still running, or one that succeeded, answers a repeated
			// call: replay is idempotent until the last replay failed too.
			last, err := tx.LockJob(ctx, replays[n-1])
			if errors.Is(err, ledger.ErrNotFound) || err == nil && last.Status != ledger.JobFailedFinal && last.Status != ledger.JobCancelled {
				newID = replays[n-1]
				return nil
			}
			if err != nil {
				return err
			}
		}
		newID = ReplayJobID(jobID, len(replays)+1)
		cmd, err := storedCommand(req)
		if err != nil {
			return err
		}
		replay := *req
		replay.JobID, replay.IdempotencyKey, replay.ReplayOf = newID, "", jobID // the key stays with the original
		replay.Principal = principal(ctx)                                       // who replayed it submitted it
		if err := tx.InsertRequest(ctx, replay); err != nil {
			return err
		}
		msg, err := QueuedJobMessage(ctx, replay, cmd)
		if err != nil {
			return err
		}
		tx.Enqueue(msg)
		if reason == "" {
			reason = "replayed by request"
		}
		tx.Append(
			ledger.Event{JobID: jobID, Type: ledger.EventJobReplayed, Reason: reason, Data: map[string]any{"replay_job_id": newID, "principal": principal(ctx)}},
			ledger.Event{JobID: newID, Type: ledger.EventJobAccepted, ToStatus: string(ledger.JobReceived),
				Reason: "REPLAY", Data: map[string]any{"replay_of": jobID, "at": clock().UTC().Format(time.RFC3339Nano), "principal": principal(ctx)}},
		)
		return tx.MarkReplayed(ctx, jobID, newID)
	})
	if err != nil {
		return nil, err
	}
	// The orchestrator creates the job; until then the request is its view.
	return store.GetJob(ctx, newID)
}

// MaxRequeues bounds how often a stranded request is enqueued again.
const MaxRequeues = 10

// Requeue enqueues the orchestrator-jobs message of an accepted request no
// orchestrator claimed (its message was dead-lettered or lost), so an accepted
// job is never lost. The message id is new: a bus that remembers the first id
// must not drop the copy. After MaxRequeues it stops and says so.
func Requeue(ctx context.Context, store *ledger.Store, jobID string) (Swept, error) {
	var out Swept
	err := store.InTx(ctx, func(tx *ledger.Tx) error {
		out = Swept{}
		req, _, err := tx.LockRequest(ctx, jobID)
		if err != nil {
			return err
		}
		if _, err := tx.LockJob(ctx, jobID); !errors.Is(err, ledger.ErrNotFound) {
			return err // claimed meanwhile (or a real error)
		}
		n, err := tx.CountEvents(ctx, jobID, ledger.EventRequestRequeued)
		if err != nil || n >= MaxRequeues {
			return err
		}
		cmd, err := storedCommand(req)
		if err != nil {
			return err
		}
		msg, err := QueuedJobMessage(ctx, *req, cmd)
		if err != nil {
			return err
		}
		msg.MessageID = fmt.Sprintf("%s#requeue-%d", msg.MessageID, n+1)
		tx.Enqueue(msg)
		reason := "NOT_CLAIMED"
		if n+1 == MaxRequeues {
			reason = "NOT_CLAIMED_LAST_REQUEUE"
		}
		tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventRequestRequeued, Reason: reason,
			Data: map[string]any{"message_id": msg.MessageID, "requeue": n + 1}})
		out = Swept{Applied: true, Outcome: "REQUEUED"}
		return nil
	})
	return out, err
}
