package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/bus/pgbus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// wordCount is what a fork writes: an Executor that reads the step input,
// writes one artifact under the workspace layout and reports small output.
type wordCount struct{}

func (wordCount) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	in, err := t.ReadInput(ctx) // missing input or a bad ref: already a permanent error
	if err != nil {
		return worker.Result{}, fmt.Errorf("word count: %w", err)
	}
	if !utf8.Valid(in) {
		// Another attempt would fail the same way: NON_RETRYABLE.
		return worker.Result{}, worker.Permanentf("word count: input is not UTF-8")
	}
	words := len(strings.Fields(string(in)))
	if _, err := t.WriteArtifact(ctx, "count", "count.txt", "text/plain", fmt.Appendf(nil, "%d\n", words)); err != nil {
		return worker.Result{}, fmt.Errorf("word count: %w", err)
	}
	t.Logger().InfoContext(ctx, "words counted", "words", words) // carries job_id, step_id, attempt_no
	return worker.Result{Output: map[string]any{"words": words}}, nil
}

// A fork implements Executor and tests it with NewTask, without a bus: the
// task reads input_ref (inside its file roots) and writes under
// <workspace_ref><step_type>/<attempt>/.
func ExampleExecutor() {
	dir, _ := os.MkdirTemp("", "lucius-example-")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "input.txt"), []byte("the quick brown fox\n"), 0o644)

	jobID := strings.Repeat("ab", 32)
	task, err := worker.NewTask(&luciusv1.Directive{
		JobId: jobID, StepId: "count", StepType: "WORDCOUNT", AttemptNo: 1,
		LeaseId:      "8d1e4a6c-2b3f-4c5d-9e8f-7a6b5c4d3e2f",
		InputRef:     "file://" + filepath.Join(dir, "input.txt"),
		WorkspaceRef: "file://" + dir + "/lucius/acme/" + jobID + "/",
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: "127.0.0.1:9091"},
	}, worker.TaskConfig{FileRoots: []string{dir}})
	if err != nil {
		log.Fatal(err)
	}
	out, err := wordCount{}.Execute(context.Background(), task)
	if err != nil {
		log.Fatal(err)
	}
	art := task.Artifacts()[0]
	rel, _ := filepath.Rel(dir, strings.TrimPrefix(art.GetUri(), "file://"))
	fmt.Println("words:", out.Output["words"])
	fmt.Println("artifact:", strings.Replace(rel, jobID, "<job_id>", 1), art.GetSizeBytes(), "bytes")
	// Output:
	// words: 4
	// artifact: lucius/acme/<job_id>/wordcount/1/count.txt 2 bytes
}

// A function is enough for a small executor.
func ExampleHandlerFunc() {
	var exec worker.Executor = worker.HandlerFunc(func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		return worker.Result{Output: map[string]any{"step": t.Directive.GetStepType()}}, nil
	})
	_ = exec
	fmt.Println("ok")
	// Output: ok
}

// Errors decide the RESULT's failure_class. Unclassified errors are retried.
func ExampleClassify() {
	for _, err := range []error{
		worker.Permanentf("page %d is not an image", 3),
		worker.Retryable(errors.New("model server busy")),
		fmt.Errorf("upload: %w", errors.New("connection reset")),
	} {
		class, reason := worker.Classify(err)
		fmt.Println(class, "-", reason)
	}
	// Output:
	// FAILURE_CLASS_NON_RETRYABLE - INVALID_INPUT: page 3 is not an image
	// FAILURE_CLASS_RETRYABLE - TRANSIENT: model server busy
	// FAILURE_CLASS_RETRYABLE - UNCLASSIFIED: upload: connection reset
}

// The wiring of a fork's main: one database for the bus and the idempotency
// store, migrations applied at start, and Run until a signal.
func ExampleNewRunner() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := database.Open(ctx, os.Getenv("DATABASE_URL"), 0, pgbus.Migrations, worker.Migrations)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b, err := pgbus.New(ctx, pool, pgbus.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	runner, err := worker.NewRunner(b, worker.NewPGStore(pool), wordCount{}, worker.Config{Service: "wordcount", Concurrency: 8})
	if err != nil {
		log.Fatal(err)
	}
	if err := runner.Run(ctx); err != nil { // returns after in-flight directives finish or are released
		log.Fatal(err)
	}
}
