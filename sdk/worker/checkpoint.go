package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Checkpoints (seed 001 §11) let a long step resume where it stopped instead
// of starting from zero: the handler saves its progress under a name with
// Task.SaveCheckpoint and, when it starts, reads the last one back with
// Task.Checkpoint. They live in the job's workspace under the step, not the
// attempt:
//
//	<workspace_ref>checkpoints/<step_id, percent-escaped>/<name>
//
// so a redelivery of the same attempt (the worker shut down or died) and a
// later attempt of the same step (a retry, a lease that expired) both see
// them, while fan-out children (step ids "<node>[<i>]") each have their own.

// ErrShuttingDown is what an Executor returns (wrapped or not) when it
// stopped early because the worker is shutting down (Task.ShuttingDown was
// closed), typically after saving a checkpoint. The runner then sends no
// RESULT: it releases the attempt's claim and abandons the message, so
// another instance, or this one after its restart, runs the attempt again
// and resumes from the checkpoint. Returned while the worker is not shutting
// down, it is an ordinary (retryable) error.
var ErrShuttingDown = errors.New("worker: shutting down")

// checkpointName is what a checkpoint may be called: a file name in every
// scheme the workspace may use.
var checkpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckpointRef is where the checkpoint name of the directive's step lives:
// <workspace_ref>checkpoints/<step_id, percent-escaped>/<name>, as a file://
// URL when the workspace is local and in the workspace's own scheme (az://)
// otherwise. It does not depend on the attempt number.
func CheckpointRef(workspaceRef, stepID, name string) (string, error) {
	if !checkpointName.MatchString(name) {
		return "", fmt.Errorf("checkpoint name %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", clip(name))
	}
	if stepID == "" {
		return "", errors.New("checkpoint: the step id is empty")
	}
	step := url.PathEscape(stepID)
	if blob.Scheme(workspaceRef) == "file" {
		root, err := blob.LocalPath(workspaceRef)
		if err != nil {
			return "", fmt.Errorf("workspace_ref: %w", err)
		}
		return blob.FileURI(filepath.Join(root, "checkpoints", step, name)), nil
	}
	if workspaceRef == "" {
		return "", errors.New("checkpoint: the workspace_ref is empty")
	}
	return strings.TrimSuffix(workspaceRef, "/") + "/checkpoints/" + step + "/" + name, nil
}

// SavedCheckpoint is a checkpoint SaveCheckpoint wrote.
type SavedCheckpoint struct {
	Name string
	// URI is where it is stored (see CheckpointRef).
	URI       string
	SizeBytes int64
	// SHA256 is the lowercase hex SHA-256 of its content.
	SHA256  string
	SavedAt time.Time
}

// SaveCheckpoint stores data as the checkpoint name (1-128 letters, digits,
// '.', '_' or '-') of this step, replacing the previous one whole (readers
// see the old content or the new, never a mix), and records a
// CHECKPOINT_SAVED event with its name on the job's audit trail. Save after
// each unit of work whose redoing you want to avoid; keep checkpoints small
// enough to read back whole (at most Config.MaxInputBytes).
//
// The checkpoint is durable when SaveCheckpoint returns nil, even when the
// event could not be recorded (that is logged). It returns an error when the
// name is invalid or the write fails (classified like WriteRef's), and an
// error wrapping ErrLeaseLost when the orchestrator answers that this
// attempt no longer owns the step: the execution's context is then
// cancelled as by a heartbeat, and the work should stop.
func (t *Task) SaveCheckpoint(ctx context.Context, name string, data []byte) error {
	ref, err := CheckpointRef(t.Directive.GetWorkspaceRef(), t.Directive.GetStepId(), name)
	if err != nil {
		return PermanentCode(CodeInvalidInput, err)
	}
	ctx, span := t.tracer.Start(ctx, "checkpoint.save", trace.WithAttributes(attribute.String("lucius.checkpoint.name", name),
		attribute.String("lucius.blob.scheme", blob.Scheme(ref))))
	defer span.End()
	w, err := t.refs.Write(ctx, ref, bytes.NewReader(data), blob.WriteOptions{MediaType: "application/octet-stream"})
	if err != nil {
		err = t.refFailed(ctx, "save checkpoint "+name, ref, err)
		span.RecordError(err)
		span.SetStatus(codes.Error, "save checkpoint")
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	saved := SavedCheckpoint{Name: name, URI: w.URI, SizeBytes: w.SizeBytes, SHA256: w.SHA256, SavedAt: time.Now()}
	span.SetAttributes(attribute.Int64("lucius.blob.size_bytes", w.SizeBytes))
	t.mu.Lock()
	t.checkpoints++
	t.lastCheckpoint = name
	report := t.onCheckpoint
	t.mu.Unlock()
	t.log.InfoContext(ctx, "checkpoint saved", "checkpoint_name", name, "uri", w.URI, "size_bytes", w.SizeBytes)
	if report == nil {
		return nil
	}
	if err := report(ctx, saved); err != nil {
		span.SetStatus(codes.Error, "checkpoint event")
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	return nil
}

// Checkpoint reads the checkpoint name of this step back: its content and
// true, or false when no checkpoint of that name was saved by any attempt
// of the step. Call it when the handler starts, and skip the work the
// checkpoint says is done. A checkpoint over Config.MaxInputBytes, or a
// storage failure, is an error (classified like ReadRef's).
func (t *Task) Checkpoint(ctx context.Context, name string) ([]byte, bool, error) {
	ref, err := CheckpointRef(t.Directive.GetWorkspaceRef(), t.Directive.GetStepId(), name)
	if err != nil {
		return nil, false, PermanentCode(CodeInvalidInput, err)
	}
	ctx, span := t.tracer.Start(ctx, "checkpoint.load", trace.WithAttributes(attribute.String("lucius.checkpoint.name", name),
		attribute.String("lucius.blob.scheme", blob.Scheme(ref))))
	defer span.End()
	data, err := blob.ReadAll(ctx, t.refs, ref, t.maxInput)
	if blob.CodeOf(err) == blob.CodeInputNotFound {
		span.SetAttributes(attribute.Bool("lucius.checkpoint.found", false))
		t.log.DebugContext(ctx, "no checkpoint to resume from", "checkpoint_name", name)
		return nil, false, nil
	}
	if err != nil {
		err = t.refFailed(ctx, "load checkpoint "+name, ref, err)
		span.RecordError(err)
		span.SetStatus(codes.Error, "load checkpoint")
		return nil, false, fmt.Errorf("load checkpoint %s: %w", name, err)
	}
	span.SetAttributes(attribute.Bool("lucius.checkpoint.found", true), attribute.Int64("lucius.blob.size_bytes", int64(len(data))))
	t.log.InfoContext(ctx, "checkpoint loaded; resuming from it", "checkpoint_name", name, "size_bytes", len(data))
	return data, true, nil
}

// ShuttingDown is closed when the worker starts shutting down (SIGTERM,
// SIGINT, or the Runner's context ending). The execution's context stays
// alive for Config.ShutdownGrace more (LUCIUS_WORKER_SHUTDOWN_GRACE): time to
// save a checkpoint and return ErrShuttingDown, or to finish. When the grace
// runs out the context is cancelled; either way the attempt is released for
// redelivery and resumes from its last checkpoint. A task not run by a
// Runner is never told to shut down unless TaskConfig.ShuttingDown says so.
func (t *Task) ShuttingDown() <-chan struct{} { return t.shutdown }

// checkpointsSaved reports how many checkpoints this execution saved and
// the last one's name, for the runner's logs.
func (t *Task) checkpointsSaved() (int, string) {
	if t == nil {
		return 0, ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkpoints, t.lastCheckpoint
}

// setCheckpointReporter sets what SaveCheckpoint calls after each write.
func (t *Task) setCheckpointReporter(fn func(context.Context, SavedCheckpoint) error) {
	t.mu.Lock()
	t.onCheckpoint = fn
	t.mu.Unlock()
}

// checkpointReporter returns the function that records each checkpoint the
// task saves as a CHECKPOINT_SAVED event (CallbackService.RecordCheckpoint),
// with the attempt's latest callback token. It retries for up to
// AckRetryTimeout; a checkpoint whose event is not recorded stays saved. An
// answer saying the attempt no longer owns the step loses the lease, as a
// heartbeat's would.
func (r *Runner) checkpointReporter(d *luciusv1.Directive, beats *heartbeats, log *slog.Logger) func(context.Context, SavedCheckpoint) error {
	key := KeyOf(d)
	return func(ctx context.Context, c SavedCheckpoint) error {
		client, err := r.callbacks.client(d.GetCallbackUrls().GetGrpcTarget())
		if err != nil {
			log.WarnContext(ctx, "checkpoint saved, but its event cannot be recorded", "checkpoint_name", c.Name, telemetry.Err(err))
			return nil
		}
		var outcome luciusv1.CallbackOutcome
		verdict, err := callRetrying(ctx, r.cfg.Backoff, r.cfg.CallTimeout, time.Now().Add(r.cfg.AckRetryTimeout),
			func(n int, err error, wait time.Duration) {
				log.WarnContext(ctx, "recording a checkpoint failed; retrying", "checkpoint_name", c.Name, "retry", n,
					"retry_in", wait, telemetry.Err(err))
			},
			func(ctx context.Context) error {
				resp, err := client.RecordCheckpoint(ctx, &luciusv1.RecordCheckpointRequest{JobId: key.JobID, StepId: key.StepID,
					AttemptNo: int32(key.AttemptNo), LeaseId: key.LeaseID, CheckpointName: c.Name, Uri: c.URI,
					SizeBytes: c.SizeBytes, Sha256: c.SHA256, SaveTime: timestamppb.New(c.SavedAt), WorkerId: r.cfg.WorkerID,
					CallbackToken: beats.callbackToken(), CorrelationId: d.GetCorrelationId()})
				outcome = resp.GetOutcome()
				return err
			})
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case verdict == verdictNotFound || (err == nil && stopOutcome(outcome)):
			log.WarnContext(ctx, "checkpoint answered: this attempt no longer owns the step; stopping the attempt",
				"checkpoint_name", c.Name, telemetry.KeyOutcome, outcome.String(), telemetry.Err(err))
			beats.loseLease()
			return ErrLeaseLost
		case err != nil:
			log.WarnContext(ctx, "checkpoint saved, but its CHECKPOINT_SAVED event was not recorded", "checkpoint_name", c.Name,
				telemetry.Err(err))
			return nil
		}
		log.DebugContext(ctx, "checkpoint recorded", "checkpoint_name", c.Name, telemetry.KeyOutcome, outcome.String())
		return nil
	}
}
