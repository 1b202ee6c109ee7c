package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// DefaultMaxInputBytes is the default limit on what Task.ReadInput reads.
const DefaultMaxInputBytes = 64 << 20

// Task is one attempt handed to an Executor: the directive plus helpers that
// follow the workspace layout and the error model.
type Task struct {
	// Directive is the parsed, validated directive. Treat it as read-only.
	Directive *luciusv1.Directive

	log      *slog.Logger
	stepDir  string // local: the step's folder in the workspace, or a scratch folder for a blob workspace
	stepRef  string // where artifacts go, in the workspace's scheme, ending in "/"
	scratch  bool   // stepDir is a scratch folder the runner removes after the attempt
	maxInput int64
	refs     *blob.Mux

	tracer   trace.Tracer
	shutdown <-chan struct{}

	mu        sync.Mutex
	artifacts []*luciusv1.ArtifactRef
	progress  *structpb.Struct // never mutated once set; replaced whole
	// onCheckpoint records a saved checkpoint's event (set by the Runner).
	onCheckpoint   func(context.Context, SavedCheckpoint) error
	checkpoints    int
	lastCheckpoint string
}

// TaskConfig configures NewTask. Zero values take the defaults noted.
type TaskConfig struct {
	// Logger is the base logger; the task adds job_id, step_id, attempt_no and
	// tenant_id. Default: a logger that discards.
	Logger *slog.Logger
	// MaxInputBytes limits ReadInput and ReadRef. Default DefaultMaxInputBytes.
	MaxInputBytes int64
	// FileRoots are the absolute folders the task may read and write files
	// in besides the job's workspace (see Config.FileRoots). Default: none.
	FileRoots []string
	// HTTPS and Azure serve https:// and az:// refs (blob.NewHTTPS,
	// blob.NewAzure; the Runner shares its own between tasks). Nil leaves
	// the scheme unsupported: such refs fail with CodeUnsupportedRef.
	HTTPS, Azure blob.Store
	// TracerProvider traces blob reads and writes and checkpoint saves and
	// loads. Default: none.
	TracerProvider trace.TracerProvider
	// ShuttingDown is what Task.ShuttingDown returns: closed when the
	// worker starts shutting down. The Runner passes its own; a test may
	// close one to play a shutdown. Default: never closed.
	ShuttingDown <-chan struct{}
}

// NewTask builds the Task for a directive, validating it first. The Runner
// calls it for every directive; tests of an Executor call it directly.
func NewTask(d *luciusv1.Directive, cfg TaskConfig) (*Task, error) {
	if err := ValidateDirective(d); err != nil {
		return nil, err
	}
	stepRef, err := StepRef(d)
	if err != nil {
		return nil, err
	}
	// The handler's local folder: the step's own in a local workspace; for a
	// blob workspace, a private scratch folder (its artifacts go to the
	// workspace through WriteArtifact).
	var dir, workspace string
	scratch := blobWorkspace(d)
	if scratch {
		if dir, err = os.MkdirTemp("", "lucius-step-"); err != nil {
			return nil, fmt.Errorf("scratch folder: %w", err)
		}
		workspace = dir
	} else {
		if dir, err = StepDir(d); err != nil {
			return nil, err
		}
		if workspace, err = blob.LocalPath(d.GetWorkspaceRef()); err != nil {
			return nil, err
		}
	}
	for _, r := range cfg.FileRoots {
		if !filepath.IsAbs(r) {
			if scratch {
				os.RemoveAll(dir) //nolint:errcheck // best effort
			}
			return nil, fmt.Errorf("file root %q is not an absolute path", clip(r))
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := cfg.MaxInputBytes
	if limit <= 0 {
		limit = DefaultMaxInputBytes
	}
	log = log.With(telemetry.JobID(d.GetJobId()), telemetry.StepID(d.GetStepId()),
		telemetry.AttemptNo(int(d.GetAttemptNo())), telemetry.TenantID(d.GetTenantId()))
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Task{Directive: d, log: log, stepDir: dir, stepRef: stepRef, scratch: scratch, maxInput: limit, tracer: tp.Tracer("lucius/worker"), shutdown: cfg.ShuttingDown,
		refs: blob.NewMux(blob.NewFiles(workspace, cfg.FileRoots), cfg.HTTPS, cfg.Azure, tp)}, nil
}

// Key is the attempt's idempotency key.
func (t *Task) Key() Key { return KeyOf(t.Directive) }

// Logger logs with job_id, step_id, attempt_no and tenant_id attached. Use its
// ...Context methods so records carry the trace id too.
func (t *Task) Logger() *slog.Logger { return t.log }

// StepDir is the local directory of this attempt: in a local workspace,
// <workspace_ref><lowercase step_type>/<attempt_no>/; in a blob workspace, a
// private scratch folder removed after the attempt (write artifacts with
// WriteArtifact, which puts them in the workspace whatever its scheme).
func (t *Task) StepDir() string { return t.stepDir }

// StepRef is where this attempt's artifacts go, in the workspace's scheme,
// ending in "/".
func (t *Task) StepRef() string { return t.stepRef }

// artifactRef is the ref of file (a relative path) in the attempt's folder.
func (t *Task) artifactRef(file string) string {
	if t.scratch {
		return t.stepRef + filepath.ToSlash(file)
	}
	return blob.FileURI(filepath.Join(t.stepDir, file))
}

// cleanup removes the scratch folder of a blob workspace's attempt.
func (t *Task) cleanup() {
	if t != nil && t.scratch {
		if err := os.RemoveAll(t.stepDir); err != nil {
			t.log.Warn("remove the attempt's scratch folder", telemetry.Err(err))
		}
	}
}

// ReadInput reads the step's input (input_ref: the previous step's primary
// artifact, or the job's input). A missing file, a directory, an unsupported
// scheme or an input over the size limit is a permanent error.
func (t *Task) ReadInput(ctx context.Context) ([]byte, error) {
	if err := t.checkInput(); err != nil {
		return nil, err
	}
	return t.ReadRef(ctx, t.Directive.GetInputRef())
}

// ReadRef reads any reference the worker serves, e.g. one of
// Directive.UpstreamArtifacts, with the same limits and classification as
// ReadInput: a file:// URL or an absolute path inside the file roots or the
// job's workspace (else a permanent CodeRefOutsideFileRoots error), an
// https:// URL the egress policy allows, or an az://account/container/path
// blob (see package blob).
func (t *Task) ReadRef(ctx context.Context, ref string) ([]byte, error) {
	data, err := blob.ReadAll(ctx, t.refs, ref, t.maxInput)
	if err != nil {
		return nil, t.refFailed(ctx, "read ref", ref, err)
	}
	return data, nil
}

// OpenInput opens the step's input (input_ref) for streaming: Size for its
// length, Read or ReadAt for its content, without the size limit of
// ReadInput. Use it for inputs that may be large. The caller closes the
// object. Errors are classified like ReadInput's.
func (t *Task) OpenInput(ctx context.Context) (blob.Object, error) {
	if err := t.checkInput(); err != nil {
		return nil, err
	}
	return t.OpenRef(ctx, t.Directive.GetInputRef())
}

// checkInput refuses to read the input of a job without a document (a
// runbook step works from its params), a permanent error.
func (t *Task) checkInput() error {
	if t.Directive.GetInputRef() == "" {
		return PermanentCode(CodeInputNotFound, errors.New("this step has no input_ref: its job has no document (a runbook step reads its params)"))
	}
	return nil
}

// OpenRef opens any reference the worker serves (see ReadRef), e.g.
// Directive.JobInputRef or a payload field naming a file, for streaming. A
// missing file or blob, a directory, a file without read permission, a file
// outside the roots, an address the egress policy refuses or an unsupported
// reference is a permanent error; a storage service failing is retryable.
// The caller closes the object.
func (t *Task) OpenRef(ctx context.Context, ref string) (blob.Object, error) {
	obj, err := t.refs.Open(ctx, ref)
	if err != nil {
		return nil, t.refFailed(ctx, "open ref", ref, err)
	}
	return obj, nil
}

// WriteRef writes r to ref (a file:// URL inside the roots or the
// workspace, or an az:// blob; https refs are read-only) and returns an
// ArtifactRef for it named name, with its size and SHA-256. It is how the
// runner writes output_ref; a handler may call it for outputs of its own.
// Writes replace the object whole.
func (t *Task) WriteRef(ctx context.Context, name, ref, mediaType string, r io.Reader) (*luciusv1.ArtifactRef, error) {
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	w, err := t.refs.Write(ctx, ref, r, blob.WriteOptions{MediaType: mediaType})
	if err != nil {
		return nil, t.refFailed(ctx, "write ref", ref, err)
	}
	return &luciusv1.ArtifactRef{Name: name, Uri: w.URI, MediaType: mediaType, SizeBytes: w.SizeBytes, Sha256: w.SHA256}, nil
}

// refFailed logs a failed read or write of a ref with the task's attributes
// and the error's reason code, and returns the error as an *Error.
func (t *Task) refFailed(ctx context.Context, msg, ref string, err error) error {
	err = refError(err)
	if ctx.Err() == nil {
		class, _ := Classify(err)
		t.log.WarnContext(ctx, msg+" failed", "ref", clip(ref), "scheme", blob.Scheme(ref), "code", blob.CodeOf(err),
			"failure_class", class.String(), telemetry.Err(err))
	}
	return err
}

// WriteArtifact writes data as the file StepRef()/file (file must be a local,
// relative path such as "output.txt" or "pages/1.txt") and returns its
// ArtifactRef: name (1-128 bytes, e.g. "text"), its URI (file:// or az://), media type
// (default application/octet-stream), size and SHA-256. Writes are atomic, so
// a retried attempt replaces its earlier output whole. Artifacts are reported
// in the RESULT in the order they were written unless the Result lists them;
// the first one is the step's primary output, the next step's input_ref.
func (t *Task) WriteArtifact(ctx context.Context, name, file, mediaType string, data []byte) (*luciusv1.ArtifactRef, error) {
	return t.WriteArtifactFrom(ctx, name, file, mediaType, bytes.NewReader(data))
}

// WriteArtifactFrom is WriteArtifact streaming the content from r (copied,
// never held in memory whole); the copy stops with ctx's error once ctx ends.
func (t *Task) WriteArtifactFrom(ctx context.Context, name, file, mediaType string, r io.Reader) (*luciusv1.ArtifactRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name == "" || len(name) > 128 {
		return nil, fmt.Errorf("artifact name %q: want 1-128 bytes", clip(name))
	}
	if !filepath.IsLocal(file) {
		return nil, fmt.Errorf("artifact %s: file %q must be a relative path inside the step directory", name, clip(file))
	}
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	ref, err := t.WriteRef(ctx, name, t.artifactRef(file), mediaType, r)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", name, err)
	}
	t.mu.Lock()
	t.artifacts = append(t.artifacts, ref)
	t.mu.Unlock()
	t.log.DebugContext(ctx, "artifact written", "artifact", name, "uri", ref.Uri, "size_bytes", ref.SizeBytes)
	return ref, nil
}

// Artifacts lists what WriteArtifact wrote so far, in order.
func (t *Task) Artifacts() []*luciusv1.ArtifactRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*luciusv1.ArtifactRef(nil), t.artifacts...)
}

// SetProgress records how far the attempt has got, e.g.
// {"percent": 40, "pages_done": 12}: the runner's next heartbeat carries it to
// the orchestrator, which records it on the attempt. Each call replaces the
// previous progress whole; nil clears it. Values must be JSON-like (nil,
// bool, numbers, string, []any, map[string]any); anything else is an error
// and keeps the previous progress. Keep it small: it travels with every
// heartbeat. Safe to call from several goroutines.
func (t *Task) SetProgress(progress map[string]any) error {
	var s *structpb.Struct
	if progress != nil {
		var err error
		if s, err = structpb.NewStruct(progress); err != nil {
			return fmt.Errorf("set progress: %w", err)
		}
	}
	t.mu.Lock()
	t.progress = s
	t.mu.Unlock()
	return nil
}

// Progress returns a copy of the last progress set with SetProgress, nil
// when none is set.
func (t *Task) Progress() map[string]any {
	s := t.progressStruct()
	if s == nil {
		return nil
	}
	return s.AsMap()
}

// progressStruct is the progress as a heartbeat carries it. The Struct is
// shared: callers must not modify it.
func (t *Task) progressStruct() *structpb.Struct {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.progress
}

// Payload returns the directive's payload as plain Go values (strings,
// float64 numbers, bools, []any, map[string]any); nil fields are absent.
func (t *Task) Payload() map[string]any {
	if t.Directive.GetPayload() == nil {
		return map[string]any{}
	}
	return t.Directive.GetPayload().AsMap()
}

// PayloadInt reads an integer payload field, def when absent. A value that
// is not an integer within [lo, hi] is a permanent error.
func (t *Task) PayloadInt(field string, def, lo, hi int) (int, error) {
	v, ok := t.Directive.GetPayload().GetFields()[field]
	if !ok || v.GetKind() == nil || v.AsInterface() == nil {
		return def, nil
	}
	f, isNum := v.AsInterface().(float64)
	if !isNum || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, PermanentCode(CodeInvalidInput, fmt.Errorf("payload.%s: want an integer in [%d, %d], have %v", field, lo, hi, v.AsInterface()))
	}
	return int(f), nil
}

// PayloadString reads a string payload field, def when absent or null. A
// value that is not a string is a permanent error.
func (t *Task) PayloadString(field, def string) (string, error) {
	v, ok := t.Directive.GetPayload().GetFields()[field]
	if !ok || v.GetKind() == nil || v.AsInterface() == nil {
		return def, nil
	}
	s, isString := v.AsInterface().(string)
	if !isString {
		return "", PermanentCode(CodeInvalidInput, fmt.Errorf("payload.%s: want a string, have %v", field, v.AsInterface()))
	}
	return s, nil
}

// PayloadStrings reads a list-of-strings payload field; nil when absent. A
// value that is not a list of strings is a permanent error.
func (t *Task) PayloadStrings(field string) ([]string, error) {
	v, ok := t.Directive.GetPayload().GetFields()[field]
	if !ok || v.AsInterface() == nil {
		return nil, nil
	}
	list := v.GetListValue()
	if list == nil {
		return nil, PermanentCode(CodeInvalidInput, fmt.Errorf("payload.%s: want a list of strings", field))
	}
	out := make([]string, 0, len(list.GetValues()))
	for i, item := range list.GetValues() {
		s, isString := item.AsInterface().(string)
		if !isString {
			return nil, PermanentCode(CodeInvalidInput, fmt.Errorf("payload.%s[%d]: want a string", field, i))
		}
		out = append(out, s)
	}
	return out, nil
}
