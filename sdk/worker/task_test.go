package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// newTask returns a task whose workspace is under a temporary directory,
// which is also its one file root.
func newTask(t *testing.T, payload map[string]any) (*worker.Task, string) {
	t.Helper()
	dir := t.TempDir()
	d := validDirective()
	d.WorkspaceRef = "file://" + dir + "/lucius/acme/" + validJobID + "/"
	p, err := structpb.NewStruct(payload)
	if err != nil {
		t.Fatal(err)
	}
	d.Payload = p
	task, err := worker.NewTask(d, worker.TaskConfig{MaxInputBytes: 16, FileRoots: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	return task, dir
}

// A task reads and writes inside its file roots and its job's workspace
// only: a path outside them, a ".." or a symbolic link leading out is a
// permanent REF_OUTSIDE_FILE_ROOTS failure, and nothing is written outside.
func TestTaskConfinesFilesToRootsAndWorkspace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	files, outside, ws := filepath.Join(dir, "files"), filepath.Join(dir, "outside"), filepath.Join(dir, "ws")
	for _, d := range []string{files, outside, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(files, "in.txt"), []byte("inside"), 0o644)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(files, "escape"))     // a link out of the root
	os.Symlink("in.txt", filepath.Join(files, "alias.txt")) // a relative link that stays inside
	d := validDirective()
	d.WorkspaceRef = "file://" + ws + "/lucius/acme/" + validJobID + "/"
	task, err := worker.NewTask(d, worker.TaskConfig{FileRoots: []string{files}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"file://" + files + "/in.txt", files + "/alias.txt"} {
		if got, err := task.ReadRef(ctx, ref); err != nil || string(got) != "inside" {
			t.Errorf("ReadRef(%s) = %q, %v; want the file", ref, got, err)
		}
	}
	art, err := task.WriteArtifact(ctx, "text", "out.txt", "", []byte("artifact"))
	if err != nil {
		t.Fatalf("write into the job's workspace: %v", err)
	}
	if got, err := task.ReadRef(ctx, art.GetUri()); err != nil || string(got) != "artifact" {
		t.Errorf("read the job's own artifact = %q, %v", got, err)
	}
	for _, ref := range []string{
		"file://" + outside + "/secret.txt",
		"file:///etc/passwd",
		"file://" + files + "/escape/secret.txt",        // a symbolic link leading out
		"file://" + files + "/escape/%2E%2E/secret.txt", // and .. within it
		"file://" + ws + "/lucius/acme/another-job/x",   // another job's workspace
		filepath.Join(outside, "secret.txt"),
	} {
		got, err := task.ReadRef(ctx, ref)
		var we *worker.Error
		if !errors.As(err, &we) || !worker.IsPermanent(err) || got != nil {
			t.Errorf("ReadRef(%s) = %q, %v; want a permanent refusal", ref, got, err)
			continue
		}
		if we.Code != worker.CodeRefOutsideFileRoots && we.Code != worker.CodeUnsupportedRef {
			t.Errorf("ReadRef(%s) code %s", ref, we.Code)
		}
		if f, err := task.OpenRef(ctx, ref); f != nil || !worker.IsPermanent(err) {
			t.Errorf("OpenRef(%s) = %v, %v; want a permanent refusal", ref, f, err)
		}
	}
	var we *worker.Error
	if _, err := task.ReadRef(ctx, "file://"+files+"/escape/secret.txt"); !errors.As(err, &we) || we.Code != worker.CodeRefOutsideFileRoots {
		t.Errorf("through the link: %v, want %s", err, worker.CodeRefOutsideFileRoots)
	}
}

func TestTaskWriteArtifactFollowsLayoutAndReportsChecksum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	task, dir := newTask(t, nil)
	ref, err := task.WriteArtifact(ctx, "vectors", "vectors.json", "", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "lucius", "acme", validJobID, "embedding", "2", "vectors.json")
	if ref.GetUri() != "file://"+want || ref.GetSizeBytes() != 7 || ref.GetSha256() != sha256Hex([]byte(`{"a":1}`)) ||
		ref.GetMediaType() != "application/octet-stream" {
		t.Errorf("artifact = %v", ref)
	}
	if got, err := os.ReadFile(want); err != nil || string(got) != `{"a":1}` {
		t.Errorf("file = %q, %v", got, err)
	}
	// Rewriting replaces the file whole and leaves no temporary files.
	if _, err := task.WriteArtifact(ctx, "vectors", "vectors.json", "application/json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(want))
	if len(entries) != 1 {
		t.Errorf("step directory holds %d entries, want 1", len(entries))
	}
	if arts := task.Artifacts(); len(arts) != 2 || arts[1].GetSizeBytes() != 2 {
		t.Errorf("Artifacts = %v", arts)
	}
}

func TestTaskWriteArtifactRejectsPathsOutsideStepDir(t *testing.T) {
	t.Parallel()
	task, _ := newTask(t, nil)
	for _, file := range []string{"../escape.txt", "/abs.txt", "", "a/../../b"} {
		if _, err := task.WriteArtifact(context.Background(), "x", file, "", nil); err == nil {
			t.Errorf("file %q accepted", file)
		}
	}
	if _, err := task.WriteArtifact(context.Background(), "", "ok.txt", "", nil); err == nil {
		t.Error("empty artifact name accepted")
	}
	if _, err := task.WriteArtifact(context.Background(), "pages", "pages/1.txt", "", []byte("p1")); err != nil {
		t.Errorf("nested relative file rejected: %v", err)
	}
}

func TestTaskReadRefClassifiesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	task, dir := newTask(t, nil)
	small := filepath.Join(dir, "small.txt")
	big := filepath.Join(dir, "big.txt")
	os.WriteFile(small, []byte("hello"), 0o644)
	os.WriteFile(big, []byte(strings.Repeat("x", 17)), 0o644)
	if got, err := task.ReadRef(ctx, "file://"+small); err != nil || string(got) != "hello" {
		t.Errorf("read file URL = %q, %v", got, err)
	}
	if got, err := task.ReadRef(ctx, small); err != nil || string(got) != "hello" {
		t.Errorf("read plain path = %q, %v", got, err)
	}
	for _, tc := range []struct {
		ref, code string
	}{
		{"file://" + filepath.Join(dir, "missing.txt"), worker.CodeInputNotFound},
		{"file://" + big, worker.CodeInvalidInput},
		{"file://" + dir, worker.CodeInvalidInput},
		{"https://example.com/in.pdf", worker.CodeUnsupportedRef},
		{"relative/path.txt", worker.CodeUnsupportedRef},
	} {
		_, err := task.ReadRef(ctx, tc.ref)
		var we *worker.Error
		if !errors.As(err, &we) || we.Code != tc.code || !worker.IsPermanent(err) {
			t.Errorf("ReadRef(%s) = %v, want permanent %s", tc.ref, err, tc.code)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := task.ReadRef(cancelled, small); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadRef with a cancelled context = %v", err)
	}
}

func TestTaskPayloadAccessors(t *testing.T) {
	t.Parallel()
	task, _ := newTask(t, map[string]any{
		"chunk_size": 120.0, "fraction": 1.5, "too_big": 1e9, "name": "x",
		"prompt_set": []any{"a", "b"}, "mixed": []any{"a", 1.0}, "nothing": nil,
	})
	for _, tc := range []struct {
		field   string
		want    int
		wantErr bool
	}{
		{"chunk_size", 120, false},
		{"absent", 200, false},
		{"nothing", 200, false},
		{"fraction", 0, true},
		{"too_big", 0, true},
		{"name", 0, true},
	} {
		got, err := task.PayloadInt(tc.field, 200, 1, 1000)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) || (err != nil && !worker.IsPermanent(err)) {
			t.Errorf("PayloadInt(%s) = %d, %v", tc.field, got, err)
		}
	}
	if got, err := task.PayloadStrings("prompt_set"); err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("PayloadStrings(prompt_set) = %v, %v", got, err)
	}
	if got, err := task.PayloadStrings("absent"); err != nil || got != nil {
		t.Errorf("PayloadStrings(absent) = %v, %v", got, err)
	}
	for _, f := range []string{"mixed", "name"} {
		if _, err := task.PayloadStrings(f); !worker.IsPermanent(err) {
			t.Errorf("PayloadStrings(%s) = %v, want a permanent error", f, err)
		}
	}
	if task.Payload()["name"] != "x" {
		t.Errorf("Payload = %v", task.Payload())
	}
}

func TestNewTaskRejectsInvalidDirective(t *testing.T) {
	t.Parallel()
	if _, err := worker.NewTask(&luciusv1.Directive{}, worker.TaskConfig{}); !errors.Is(err, worker.ErrInvalidDirective) {
		t.Errorf("NewTask = %v, want ErrInvalidDirective", err)
	}
}

func TestTaskOpenRefStreamsWithoutTheInputLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	task, dir := newTask(t, nil) // MaxInputBytes 16
	big := filepath.Join(dir, "big.txt")
	content := strings.Repeat("0123456789", 10)
	os.WriteFile(big, []byte(content), 0o644)
	f, err := task.OpenRef(ctx, "file://"+big)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(content)) {
		t.Errorf("Size = %d; want %d bytes", f.Size(), len(content))
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 42); err != nil || string(buf) != content[42:47] {
		t.Errorf("ReadAt = %q, %v", buf, err)
	}
	for _, tc := range []struct {
		ref, code string
	}{
		{"file://" + filepath.Join(dir, "missing.txt"), worker.CodeInputNotFound},
		{"file://" + dir, worker.CodeInvalidInput},
		{"s3://bucket/in.tif", worker.CodeUnsupportedRef},
	} {
		f, err := task.OpenRef(ctx, tc.ref)
		var we *worker.Error
		if !errors.As(err, &we) || we.Code != tc.code || !worker.IsPermanent(err) || f != nil {
			t.Errorf("OpenRef(%s) = %v, %v; want permanent %s", tc.ref, f, err, tc.code)
		}
	}
	// OpenInput opens input_ref, which names a file outside this test's directory.
	if _, err := task.OpenInput(ctx); !worker.IsPermanent(err) {
		t.Errorf("OpenInput of a missing input_ref = %v, want a permanent error", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := task.OpenRef(cancelled, big); !errors.Is(err, context.Canceled) {
		t.Errorf("OpenRef with a cancelled context = %v", err)
	}
}

func TestTaskWriteArtifactFromStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	task, dir := newTask(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := task.WriteArtifactFrom(ctx, "big", "big.bin", "", strings.NewReader("data")); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteArtifactFrom with a cancelled context = %v", err)
	}
	// A reader that cancels mid-copy: the copy stops at the next read.
	ctx, cancel = context.WithCancel(context.Background())
	r := &cancellingReader{cancel: cancel}
	if _, err := task.WriteArtifactFrom(ctx, "big", "big.bin", "", r); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteArtifactFrom cancelled mid-copy = %v", err)
	}
	if r.reads != 1 {
		t.Errorf("reader was read %d times after cancellation, want 1 read in total", r.reads)
	}
	if len(task.Artifacts()) != 0 {
		t.Errorf("Artifacts = %v, want none", task.Artifacts())
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "lucius", "acme", validJobID, "embedding", "2"))
	if len(entries) != 0 {
		t.Errorf("step directory holds %d entries after interrupted writes, want 0", len(entries))
	}
}

// cancellingReader returns endless data and cancels its context on the first read.
type cancellingReader struct {
	cancel func()
	reads  int
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	c.reads++
	c.cancel()
	return len(p), nil
}

func TestTaskPayloadString(t *testing.T) {
	t.Parallel()
	task, _ := newTask(t, map[string]any{"name": "x", "empty": "", "number": 3.0, "list": []any{"a"}, "nothing": nil})
	for _, tc := range []struct {
		field   string
		want    string
		wantErr bool
	}{
		{"name", "x", false},
		{"empty", "", false},
		{"absent", "def", false},
		{"nothing", "def", false},
		{"number", "", true},
		{"list", "", true},
	} {
		got, err := task.PayloadString(tc.field, "def")
		if (err != nil) != tc.wantErr || got != tc.want || (err != nil && !worker.IsPermanent(err)) {
			t.Errorf("PayloadString(%s) = %q, %v", tc.field, got, err)
		}
	}
}

func TestTaskSetProgress(t *testing.T) {
	t.Parallel()
	task, _ := newTask(t, nil)
	if p := task.Progress(); p != nil {
		t.Fatalf("progress before SetProgress = %v, want nil", p)
	}
	if err := task.SetProgress(map[string]any{"percent": 40, "stage": "ocr", "pages": []any{1, 2}}); err != nil {
		t.Fatal(err)
	}
	got := task.Progress()
	if got["percent"] != 40.0 || got["stage"] != "ocr" || len(got["pages"].([]any)) != 2 {
		t.Errorf("progress = %v", got)
	}
	got["percent"] = 99.0 // a copy: the task's progress is unchanged
	if p := task.Progress(); p["percent"] != 40.0 {
		t.Errorf("changing the returned map changed the progress to %v", p)
	}
	if err := task.SetProgress(map[string]any{"started": time.Now()}); err == nil || !strings.Contains(err.Error(), "set progress") {
		t.Errorf("SetProgress of a non-JSON value = %v, want an error", err)
	}
	if p := task.Progress(); p["percent"] != 40.0 {
		t.Errorf("a rejected SetProgress replaced the progress with %v", p)
	}
	if err := task.SetProgress(nil); err != nil || task.Progress() != nil {
		t.Errorf("SetProgress(nil) = %v, progress %v; want it cleared", err, task.Progress())
	}
}
