package blob

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lucius-platform/lucius/base/egress"
)

// setupHTTPS serves content over TLS on 127.0.0.1 and returns an https
// store whose policy allows loopback (allow) or not, trusting the server's
// certificate.
func setupHTTPS(t *testing.T, allow bool) (*HTTPS, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/data/in.txt":
			http.ServeContent(w, r, "in.txt", time.Time{}, strings.NewReader("0123456789abcdef"))
		case "/data/no-range.txt":
			w.Write([]byte("0123456789")) //nolint:errcheck
		case "/data/streamed": // no Content-Length: the body is flushed in chunks
			w.Write([]byte("01234")) //nolint:errcheck
			w.(http.Flusher).Flush()
			w.Write([]byte("56789")) //nolint:errcheck
		case "/data/short-range": // claims 16 bytes, cuts every range short
			if r.Header.Get("Range") == "" {
				http.ServeContent(w, r, "in.txt", time.Time{}, strings.NewReader("0123456789abcdef"))
				return
			}
			w.Header().Set("Content-Range", "bytes 0-7/16")
			w.Header().Set("Content-Length", "8")
			w.WriteHeader(http.StatusPartialContent)
			w.Write([]byte("0123")) //nolint:errcheck
		case "/data/forbidden":
			w.WriteHeader(http.StatusForbidden)
		case "/data/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/data/teapot":
			w.WriteHeader(http.StatusTeapot)
		case "/redirect":
			http.Redirect(w, r, "https://169.254.169.254/latest/meta-data", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	var policy egress.Policy
	if allow {
		policy.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}
	h := NewHTTPS(policy)
	h.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	return h, srv.URL
}

func TestHTTPSReadsAllowedRefsAndClassifiesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, base := setupHTTPS(t, true)
	obj, err := h.Open(ctx, base+"/data/in.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if got, err := io.ReadAll(obj); err != nil || string(got) != "0123456789abcdef" || obj.Size() != 16 {
		t.Errorf("read %q (size %d), %v", got, obj.Size(), err)
	}
	part := make([]byte, 4)
	if n, err := obj.ReadAt(part, 10); err != nil || string(part[:n]) != "abcd" {
		t.Errorf("ReadAt = %q, %v", part[:n], err)
	}
	if n, err := obj.ReadAt(make([]byte, 8), 12); n != 4 || !errors.Is(err, io.EOF) {
		t.Errorf("ReadAt past the end = %d, %v; want 4, EOF", n, err)
	}
	noRange, err := h.Open(ctx, base+"/data/no-range.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer noRange.Close()
	if _, err := noRange.ReadAt(part, 2); CodeOf(err) != CodeInvalidInput {
		t.Errorf("ReadAt on a server without ranges = %v; want %s", err, CodeInvalidInput)
	}
	short, err := h.Open(ctx, base+"/data/short-range")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	var cut *Error
	if _, err := short.ReadAt(make([]byte, 8), 0); !errors.As(err, &cut) || !cut.Retryable {
		t.Errorf("a range cut short before the end = %v; want a retryable failure, not EOF", err)
	}
	for _, tc := range []struct {
		ref       string
		code      string
		retryable bool
	}{
		{base + "/data/streamed", CodeInvalidInput, false}, // no length: Size cannot be known
		{base + "/data/missing.txt", CodeInputNotFound, false},
		{base + "/data/forbidden", CodeAccessDenied, false},
		{base + "/data/busy", CodeStorageUnavailable, true},
		{base + "/data/teapot", CodeInvalidInput, false},
		{base + "/redirect", CodeRefHostNotAllowed, false}, // the redirect's target is metadata
		{strings.Replace(base, "https://", "https://user:pw@", 1) + "/data/in.txt", CodeInvalidRef, false},
		{strings.Replace(base, "https://", "http://", 1) + "/data/in.txt", CodeUnsupportedRef, false},
	} {
		_, err := h.Open(ctx, tc.ref)
		var be *Error
		if !errors.As(err, &be) || be.Code != tc.code || be.Retryable != tc.retryable {
			t.Errorf("Open(%s) = %v; want code %s, retryable %v", tc.ref, err, tc.code, tc.retryable)
		}
	}
	if _, err := h.Write(ctx, base+"/data/out.txt", strings.NewReader("x"), WriteOptions{}); CodeOf(err) != CodeRefReadOnly {
		t.Errorf("Write = %v; want %s", err, CodeRefReadOnly)
	}
}

func TestHTTPSRefusesLoopbackTheOperatorDidNotAllow(t *testing.T) {
	t.Parallel()
	h, base := setupHTTPS(t, false)
	_, err := h.Open(context.Background(), base+"/data/in.txt")
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeRefHostNotAllowed || be.Retryable || !errors.Is(err, egress.ErrForbidden) {
		t.Fatalf("Open of a loopback ref = %v; want permanent %s", err, CodeRefHostNotAllowed)
	}
}

func TestMuxRoutesBySchemeAndRefusesOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	h, base := setupHTTPS(t, true)
	m := NewMux(NewFiles(dir, nil), h, nil, nil)
	if _, err := m.Write(ctx, FileURI(dir+"/a.txt"), strings.NewReader("file"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{FileURI(dir + "/a.txt"): "file", dir + "/a.txt": "file", base + "/data/in.txt": "0123456789abcdef"} {
		if got, err := ReadAll(ctx, m, ref, 100); err != nil || string(got) != want {
			t.Errorf("ReadAll(%s) = %q, %v; want %q", ref, got, err, want)
		}
	}
	for _, ref := range []string{"az://acct01/data/x", "s3://bucket/x", "relative/x"} {
		if _, err := m.Open(ctx, ref); CodeOf(err) != CodeUnsupportedRef {
			t.Errorf("Open(%s) = %v; want %s", ref, err, CodeUnsupportedRef)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Open(cancelled, base+"/data/in.txt"); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled context = %v", err)
	}
}

// Every Open and Write through the Mux is a span carrying the scheme, the
// size, and on failure the error code.
func TestMuxTracesReadsAndWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	dir := t.TempDir()
	m := NewMux(NewFiles(dir, nil), nil, nil, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	if _, err := m.Write(ctx, FileURI(dir+"/a.txt"), strings.NewReader("12345"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Open(ctx, FileURI(dir+"/missing.txt")); err == nil {
		t.Fatal("opened a missing file")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]string {
		out := map[string]string{}
		for _, kv := range s.Attributes() {
			out[string(kv.Key)] = kv.Value.String()
		}
		return out
	}
	if w := attrs(spans[0]); spans[0].Name() != "blob.write" || w["lucius.blob.scheme"] != "file" || w["lucius.blob.size_bytes"] != "5" {
		t.Errorf("write span %s %v", spans[0].Name(), w)
	}
	if o := attrs(spans[1]); spans[1].Name() != "blob.open" || o["lucius.blob.error_code"] != CodeInputNotFound || spans[1].Status().Code != codes.Error {
		t.Errorf("open span %s %v %v", spans[1].Name(), o, spans[1].Status())
	}
}
