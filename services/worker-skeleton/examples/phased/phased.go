// Package phased is an example of a long step that resumes from checkpoints
// (seed 001 §11) instead of starting from zero. Its one handler, PHASED,
// works in phases; after each phase it saves a checkpoint ("progress") with
// what is done so far. When it starts, it loads that checkpoint and skips the
// phases already done, whichever attempt or worker did them. At the worker's
// shutdown notice (Task.ShuttingDown) it stops between two phases and
// returns worker.ErrShuttingDown: the runner releases the attempt, and the
// next execution resumes after the last phase saved.
//
// Payload: phases (1-100, default 4) and phase_ms (0-600000, default 1000),
// how long each phase works. Each phase folds its number into a SHA-256
// chain, so the final digest is the same however many executions the step
// took (Digest recomputes it). The output, also written as the artifact
// phases.json, records which execution ran each phase:
//
//	{"phases": 4, "digest": "…", "run": 2, "resumed_after": 2,
//	 "done": [{"phase": 1, "run": 1, "attempt_no": 1}, …]}
//
// run numbers the executions that got as far as a checkpoint: 1 for an
// execution that found none, the checkpoint's run + 1 for one resuming.
package phased

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/lucius-platform/lucius/sdk/worker"
)

// Service is the platform service that serves PHASED.
const Service = "phased"

// Handler is the step type (workflow handler) this example serves.
const Handler = "PHASED"

// CheckpointName is the checkpoint the handler saves after each phase.
const CheckpointName = "progress"

// Executor runs PHASED steps.
type Executor struct{}

var _ worker.Executor = Executor{}

// Phase is one phase done: by which execution (run) and attempt.
type Phase struct {
	Phase     int `json:"phase"`
	Run       int `json:"run"`
	AttemptNo int `json:"attempt_no"`
}

// Progress is the checkpoint: the phases done and the digest after them.
type Progress struct {
	Run    int     `json:"run"`
	Digest string  `json:"digest"`
	Done   []Phase `json:"done"`
}

// Digest is the SHA-256 chain after phases phases, starting from the
// digest of nothing: what a step of that many phases outputs.
func Digest(phases int) string {
	d := sha256.Sum256(nil)
	for p := 1; p <= phases; p++ {
		d = next(d[:], p)
	}
	return hex.EncodeToString(d[:])
}

func next(prev []byte, phase int) [32]byte {
	return sha256.Sum256(append(append([]byte(nil), prev...), strconv.Itoa(phase)...))
}

// Execute resumes from the last checkpoint, runs the remaining phases with
// a checkpoint after each, and reports which execution ran which phase.
func (Executor) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	phases, err := t.PayloadInt("phases", 4, 1, 100)
	if err != nil {
		return worker.Result{}, err
	}
	phaseMS, err := t.PayloadInt("phase_ms", 1000, 0, 600000)
	if err != nil {
		return worker.Result{}, err
	}
	p, err := load(ctx, t)
	if err != nil {
		return worker.Result{}, err
	}
	resumedAfter := len(p.Done)
	attemptNo := int(t.Directive.GetAttemptNo())
	digest, err := hex.DecodeString(p.Digest)
	if err != nil || len(digest) != sha256.Size {
		return worker.Result{}, worker.Permanent(fmt.Errorf("phased: checkpoint digest %q is not a SHA-256", p.Digest))
	}
	for phase := len(p.Done) + 1; phase <= phases; phase++ {
		if err := work(ctx, t, time.Duration(phaseMS)*time.Millisecond); err != nil {
			return worker.Result{}, fmt.Errorf("phased: phase %d of %d (resume after phase %d): %w", phase, phases, phase-1, err)
		}
		d := next(digest, phase)
		digest = d[:]
		p.Digest = hex.EncodeToString(digest)
		p.Done = append(p.Done, Phase{Phase: phase, Run: p.Run, AttemptNo: attemptNo})
		data, err := json.Marshal(p)
		if err != nil {
			return worker.Result{}, err
		}
		if err := t.SaveCheckpoint(ctx, CheckpointName, data); err != nil {
			return worker.Result{}, fmt.Errorf("phased: %w", err)
		}
	}
	done := make([]any, len(p.Done))
	for i, ph := range p.Done {
		done[i] = map[string]any{"phase": ph.Phase, "run": ph.Run, "attempt_no": ph.AttemptNo}
	}
	output := map[string]any{"phases": phases, "digest": p.Digest, "run": p.Run, "resumed_after": resumedAfter, "done": done}
	body, err := json.Marshal(output)
	if err != nil {
		return worker.Result{}, err
	}
	if _, err := t.WriteArtifact(ctx, "phases", "phases.json", "application/json", body); err != nil {
		return worker.Result{}, fmt.Errorf("phased: %w", err)
	}
	return worker.Result{Output: output}, nil
}

// load reads the checkpoint, or starts run 1 when there is none.
func load(ctx context.Context, t *worker.Task) (Progress, error) {
	data, found, err := t.Checkpoint(ctx, CheckpointName)
	if err != nil {
		return Progress{}, fmt.Errorf("phased: %w", err)
	}
	if !found {
		d := sha256.Sum256(nil)
		return Progress{Run: 1, Digest: hex.EncodeToString(d[:])}, nil
	}
	var p Progress
	if err := json.Unmarshal(data, &p); err != nil {
		return Progress{}, worker.Permanent(fmt.Errorf("phased: checkpoint %s: %w", CheckpointName, err))
	}
	p.Run++
	return p, nil
}

// work is one phase's placeholder work: it takes d, unless the worker
// is or starts shutting down (ErrShuttingDown: the phase is not done) or ctx ends.
func work(ctx context.Context, t *worker.Task, d time.Duration) error {
	select {
	case <-t.ShuttingDown():
		return worker.ErrShuttingDown // no new phase once told
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.ShuttingDown():
		return worker.ErrShuttingDown
	case <-ctx.Done():
		return ctx.Err()
	}
}
