package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// Where a checkpoint lives depends on the workspace and the step only, never
// on the attempt, and each fan-out child has its own; names that are not a
// plain file name are refused.
func TestCheckpointRefDependsOnTheStepNotTheAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, workspace, step, checkpoint string
		want                              string
		wantErr                           bool
	}{
		{"file workspace", "file:///var/lucius/lucius/acme/j1/", "ocr", "progress", "file:///var/lucius/lucius/acme/j1/checkpoints/ocr/progress", false},
		{"absolute path workspace", "/var/lucius/lucius/acme/j1", "ocr", "p.json", "file:///var/lucius/lucius/acme/j1/checkpoints/ocr/p.json", false},
		{"fan-out child", "file:///ws/j1/", "split[3]", "progress", "file:///ws/j1/checkpoints/split%255B3%255D/progress", false},
		{"az workspace", "az://acct/work/lucius/acme/j1/", "split[3]", "phase_2", "az://acct/work/lucius/acme/j1/checkpoints/split%5B3%5D/phase_2", false},
		{"az workspace without slash", "az://acct/work/j1", "ocr", "progress", "az://acct/work/j1/checkpoints/ocr/progress", false},
		{"empty name", "file:///ws/j1/", "ocr", "", "", true},
		{"path in name", "file:///ws/j1/", "ocr", "../other/progress", "", true},
		{"dot name", "file:///ws/j1/", "ocr", "..", "", true},
		{"long name", "file:///ws/j1/", "ocr", strings.Repeat("a", 129), "", true},
		{"empty step", "file:///ws/j1/", "", "progress", "", true},
		{"empty workspace", "", "ocr", "progress", "", true},
	}
	for _, tt := range tests {
		got, err := worker.CheckpointRef(tt.workspace, tt.step, tt.checkpoint)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: CheckpointRef = %q, %v; want %q (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// checkpointTask is a task of attempt attemptNo of step stepID in the job
// workspace under dir.
func checkpointTask(t *testing.T, dir, stepID string, attemptNo int32, shutdown <-chan struct{}) *worker.Task {
	t.Helper()
	d := validDirective()
	d.WorkspaceRef = "file://" + dir + "/lucius/acme/" + validJobID + "/"
	d.StepId, d.AttemptNo = stepID, attemptNo
	task, err := worker.NewTask(d, worker.TaskConfig{MaxInputBytes: 64, ShuttingDown: shutdown})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// A checkpoint saved by one attempt is what a later attempt (or a
// redelivery of the same one) of the same step reads back; other steps and
// other fan-out children see none; a later save replaces it whole.
func TestTaskCheckpointsResumeAcrossAttemptsOfOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	first := checkpointTask(t, dir, "split[1]", 1, nil)
	if _, found, err := first.Checkpoint(ctx, "progress"); err != nil || found {
		t.Fatalf("a step's first checkpoint read: found %v, %v; want none", found, err)
	}
	for _, data := range []string{"phase 1 done", "phase 2 done"} {
		if err := first.SaveCheckpoint(ctx, "progress", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		step    string
		attempt int32
		want    string
		found   bool
	}{
		{"same attempt, redelivered", "split[1]", 1, "phase 2 done", true},
		{"next attempt", "split[1]", 2, "phase 2 done", true},
		{"another fan-out child", "split[2]", 1, "", false},
		{"another step", "split", 1, "", false},
	}
	for _, tt := range tests {
		task := checkpointTask(t, dir, tt.step, tt.attempt, nil)
		got, found, err := task.Checkpoint(ctx, "progress")
		if err != nil || found != tt.found || string(got) != tt.want {
			t.Errorf("%s: Checkpoint = %q, %v, %v; want %q, %v", tt.name, got, found, err, tt.want, tt.found)
		}
	}
	// The checkpoint is a file of the job's workspace, not of an attempt's directory.
	p := filepath.Join(dir, "lucius", "acme", validJobID, "checkpoints", "split%5B1%5D", "progress")
	if raw, err := os.ReadFile(p); err != nil || string(raw) != "phase 2 done" {
		t.Fatalf("checkpoint file %s: %q, %v", p, raw, err)
	}
}

// Bad names and checkpoints over the read limit are errors, classified
// permanent; nothing is written for a bad name.
func TestTaskCheckpointErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	task := checkpointTask(t, dir, "ocr", 1, nil)
	if err := task.SaveCheckpoint(ctx, "big", []byte(strings.Repeat("x", 65))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		op   func() error
	}{
		{"save with a path as name", func() error { return task.SaveCheckpoint(ctx, "a/b", []byte("x")) }},
		{"save with an empty name", func() error { return task.SaveCheckpoint(ctx, "", []byte("x")) }},
		{"load with a path as name", func() error { _, _, err := task.Checkpoint(ctx, "../ocr/big"); return err }},
		{"load over the read limit", func() error { _, _, err := task.Checkpoint(ctx, "big"); return err }},
	}
	for _, tt := range tests {
		err := tt.op()
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if class, _ := worker.Classify(err); class != luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE {
			t.Errorf("%s: %v classified %s, want NON_RETRYABLE", tt.name, err, class)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "lucius", "acme", validJobID, "checkpoints", "ocr", "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a bad name wrote something: %v", err)
	}
}

// ShuttingDown is the notice the runner gives: never closed for a task
// without one, closed when the channel it was given closes.
func TestTaskShuttingDownIsTheRunnersNotice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	select {
	case <-checkpointTask(t, dir, "ocr", 1, nil).ShuttingDown():
		t.Fatal("a task without a notice reports a shutdown")
	default:
	}
	notice := make(chan struct{})
	task := checkpointTask(t, dir, "ocr", 1, notice)
	select {
	case <-task.ShuttingDown():
		t.Fatal("shutdown reported before the notice")
	default:
	}
	close(notice)
	<-task.ShuttingDown() // a deadline-free wait: closed by now
}
