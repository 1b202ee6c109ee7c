// Package blob reads and writes what a worker's refs name, whatever their
// scheme, through one interface (Store):
//
//   - file:///abs/path: a local file inside the job's workspace or the
//     operator's file roots (LUCIUS_FILE_ROOTS), confined with os.Root (Files);
//   - https://host/path: read-only, every connection through the egress
//     policy's dialer (LUCIUS_EGRESS_ALLOW), so no ref reaches an address the
//     operator did not allow (HTTPS);
//   - az://account/container/path: Azure Blob Storage through azblob, with
//     Microsoft Entra credentials (DefaultAzureCredential, workload or
//     managed identity) or, for Azurite and tests, a shared key the operator
//     configures; large writes are uploaded in blocks (Azure).
//
// Mux routes a ref to the store of its scheme and wraps every read and
// write in a span. Errors carry a reason code (Error.Code) and say whether
// another attempt could succeed (Error.Retryable): a bad ref, a missing
// object, a container that does not exist or a refused address is
// permanent; a storage service that is down or throttling is retryable.
//
// The package depends on base/egress, OpenTelemetry and the Azure SDK only,
// never on the control plane's ledger or engine, so it can move into the
// worker SDK whole.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Store reads and writes the objects refs name.
type Store interface {
	// Open opens ref for reading. The caller closes the Object.
	Open(ctx context.Context, ref string) (Object, error)
	// Write replaces the object ref names with everything r yields, whole
	// (readers never see a partial object), and returns its size and
	// SHA-256.
	Write(ctx context.Context, ref string, r io.Reader, opts WriteOptions) (Written, error)
}

// Object is an open object: read it in sequence, or at offsets (ReadAt is
// safe beside Read, as os.File's is).
type Object interface {
	io.Reader
	io.ReaderAt
	io.Closer
	// Size is the object's length in bytes.
	Size() int64
}

// WriteOptions describe an object being written.
type WriteOptions struct {
	// MediaType is stored as the object's content type where the store
	// keeps one (az). Default application/octet-stream.
	MediaType string
}

// Written is what a Write stored.
type Written struct {
	// URI names the object written, in the ref's scheme.
	URI       string
	SizeBytes int64
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string
}

// Reason codes of the errors this package returns (Error.Code). Workers
// report them as the prefix of a failed RESULT's reason.
const (
	// CodeInvalidRef: the ref is malformed for its scheme (an az:// ref
	// without a container, an account name Azure cannot have, ...).
	CodeInvalidRef = "INVALID_REF"
	// CodeUnsupportedRef: no store serves the ref's scheme here.
	CodeUnsupportedRef = "UNSUPPORTED_REF"
	// CodeRefOutsideFileRoots: a file ref names a file outside the file
	// roots and the job's workspace, directly, through "..", or through a
	// symbolic link.
	CodeRefOutsideFileRoots = "REF_OUTSIDE_FILE_ROOTS"
	// CodeRefReadOnly: a write to a scheme that is read-only (https).
	CodeRefReadOnly = "REF_READ_ONLY"
	// CodeRefHostNotAllowed: the egress policy refuses the address the ref's
	// host (or the storage account's endpoint) resolves to.
	CodeRefHostNotAllowed = "REF_HOST_NOT_ALLOWED"
	// CodeInputNotFound: the ref names nothing.
	CodeInputNotFound = "INPUT_NOT_FOUND"
	// CodeInvalidInput: the ref names something unreadable as input (a
	// directory, a file without read permission, more than the size limit).
	CodeInvalidInput = "INVALID_INPUT"
	// CodeContainerNotFound: the az:// ref's container does not exist in
	// its account (Lucius never creates containers).
	CodeContainerNotFound = "CONTAINER_NOT_FOUND"
	// CodeAccessDenied: the storage service refused the worker's identity
	// (HTTP 401 or 403): a role assignment or key is missing.
	CodeAccessDenied = "REF_ACCESS_DENIED"
	// CodeCredentialUnavailable: no credential could be had for the
	// account (no key configured for it in shared-key mode, no identity
	// found by DefaultAzureCredential).
	CodeCredentialUnavailable = "BLOB_CREDENTIAL_UNAVAILABLE" //nolint:gosec // G101: an error code, not a credential
	// CodeStorageUnavailable: the storage service failed, timed out or
	// throttled; retryable.
	CodeStorageUnavailable = "STORAGE_UNAVAILABLE"
)

// Error is a failure with a reason code and whether retrying may help.
type Error struct {
	Code      string
	Retryable bool
	Err       error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent is an Error another attempt would meet again.
func Permanent(code string, err error) error { return &Error{Code: code, Err: err} }

// Transient is an Error another attempt may not meet.
func Transient(code string, err error) error { return &Error{Code: code, Retryable: true, Err: err} }

// CodeOf is the Code of the outermost Error in err's chain, "" when none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Mux serves every scheme through the store registered for it and traces
// each Open and Write (spans "blob.open" and "blob.write").
type Mux struct {
	stores map[string]Store
	tracer trace.Tracer
}

// NewMux routes refs by scheme: "file" (also absolute paths), "https", "az"
// to the stores given; a nil store leaves its scheme unsupported. tp may be
// nil (no spans).
func NewMux(files, https, az Store, tp trace.TracerProvider) *Mux {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	m := &Mux{stores: map[string]Store{}, tracer: tp.Tracer("lucius/worker/blob")}
	for scheme, s := range map[string]Store{"file": files, "https": https, "az": az} {
		if s != nil {
			m.stores[scheme] = s
		}
	}
	return m
}

// Scheme is ref's scheme in lowercase; "file" for an absolute path.
func Scheme(ref string) string {
	if strings.HasPrefix(ref, "/") {
		return "file"
	}
	scheme, _, ok := strings.Cut(ref, ":")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

func (m *Mux) store(ref string) (Store, error) {
	scheme := Scheme(ref)
	if s, ok := m.stores[scheme]; ok {
		return s, nil
	}
	if scheme == "" {
		return nil, Permanent(CodeUnsupportedRef, fmt.Errorf("ref %q: want a URL (file://, https://, az://) or an absolute path", Clip(ref)))
	}
	return nil, Permanent(CodeUnsupportedRef, fmt.Errorf("ref %q: scheme %q is not served by this worker", Clip(ref), Clip(scheme)))
}

// Open opens ref with the store of its scheme.
func (m *Mux) Open(ctx context.Context, ref string) (Object, error) {
	ctx, span := m.tracer.Start(ctx, "blob.open", trace.WithAttributes(attribute.String("lucius.blob.scheme", Scheme(ref))))
	defer span.End()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := m.store(ref)
	if err == nil {
		var obj Object
		if obj, err = s.Open(ctx, ref); err == nil {
			span.SetAttributes(attribute.Int64("lucius.blob.size_bytes", obj.Size()))
			return obj, nil
		}
	}
	fail(span, err)
	return nil, err
}

// Write writes ref with the store of its scheme.
func (m *Mux) Write(ctx context.Context, ref string, r io.Reader, opts WriteOptions) (Written, error) {
	ctx, span := m.tracer.Start(ctx, "blob.write", trace.WithAttributes(attribute.String("lucius.blob.scheme", Scheme(ref))))
	defer span.End()
	if err := ctx.Err(); err != nil {
		return Written{}, err
	}
	s, err := m.store(ref)
	if err == nil {
		var w Written
		if w, err = s.Write(ctx, ref, contextReader{ctx: ctx, r: r}, opts); err == nil {
			span.SetAttributes(attribute.Int64("lucius.blob.size_bytes", w.SizeBytes))
			return w, nil
		}
	}
	fail(span, err)
	return Written{}, err
}

func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, CodeOf(err))
	if code := CodeOf(err); code != "" {
		span.SetAttributes(attribute.String("lucius.blob.error_code", code))
	}
}

// ReadAll reads at most limit bytes of ref through s. More than limit is a
// permanent CodeInvalidInput error.
func ReadAll(ctx context.Context, s Store, ref string, limit int64) ([]byte, error) {
	obj, err := s.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	if obj.Size() > limit {
		return nil, Permanent(CodeInvalidInput, fmt.Errorf("read %s: its %d bytes are over the %d-byte input limit", Clip(ref), obj.Size(), limit))
	}
	data, err := io.ReadAll(io.LimitReader(contextReader{ctx: ctx, r: obj}, limit+1))
	if err != nil {
		return nil, readError(ref, err)
	}
	if int64(len(data)) > limit {
		return nil, Permanent(CodeInvalidInput, fmt.Errorf("read %s: larger than the %d-byte input limit", Clip(ref), limit))
	}
	return data, nil
}

// readError keeps a classified error (or the context's) and makes any other
// failure while reading a body retryable.
func readError(ref string, err error) error {
	var e *Error
	if errors.As(err, &e) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return Transient(CodeStorageUnavailable, fmt.Errorf("read %s: %w", Clip(ref), err))
}

// JoinRef resolves an output ref for a file named base: ref itself, or base
// inside it when ref ends with "/" (a folder or a blob prefix).
func JoinRef(ref, base string) string {
	if strings.HasSuffix(ref, "/") {
		return ref + escapeSegment(base)
	}
	return ref
}

// escapeSegment percent-encodes what a URL path segment cannot hold.
func escapeSegment(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(s, "%", "%25"), "?", "%3F"), "#", "%23")
}

// ContextReader returns r failing its reads once ctx has ended, so a long
// copy honours cancellation between reads.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return contextReader{ctx: ctx, r: r} }

type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Clip shortens s for an error message.
func Clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return TruncateUTF8(s, n) + "…"
}

// TruncateUTF8 cuts s to at most n bytes without splitting a character.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
