package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/lucius-platform/lucius/core/egress"
)

// HTTPS is the read-only Store of https refs. Every connection, redirects
// included, goes through the egress policy's dialer: a ref whose host
// resolves to a loopback, private, link-local or metadata address fails
// with CodeRefHostNotAllowed unless LUCIUS_EGRESS_ALLOW allows it.
type HTTPS struct {
	client *http.Client
}

var _ Store = (*HTTPS)(nil)

// NewHTTPS returns an https store dialing under policy.
func NewHTTPS(policy egress.Policy) *HTTPS {
	return &HTTPS{client: policy.Client(0, nil)}
}

// Open GETs ref. 404 and 410 are CodeInputNotFound, 401 and 403
// CodeAccessDenied, other 4xx CodeInvalidInput (all permanent); 408, 429,
// 5xx and network failures are retryable.
func (h *HTTPS) Open(ctx context.Context, ref string) (Object, error) {
	u, err := parseHTTPS(ref)
	if err != nil {
		return nil, err
	}
	resp, err := h.get(ctx, u, "")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, statusError(ref, resp.StatusCode)
	}
	return &httpObject{ctx: ctx, h: h, u: u, ref: ref, body: resp.Body, size: resp.ContentLength}, nil
}

// Write refuses: https refs are read-only.
func (h *HTTPS) Write(_ context.Context, ref string, _ io.Reader, _ WriteOptions) (Written, error) {
	return Written{}, Permanent(CodeRefReadOnly, fmt.Errorf("ref %q: https refs are read-only; write outputs to an az:// or file:// ref", Clip(ref)))
}

func parseHTTPS(ref string) (*url.URL, error) {
	u, err := url.Parse(ref)
	switch {
	case err != nil:
		return nil, Permanent(CodeInvalidRef, fmt.Errorf("ref %q: %w", Clip(ref), err))
	case u.Scheme != "https":
		return nil, Permanent(CodeUnsupportedRef, fmt.Errorf("ref %q: want an https:// URL", Clip(ref)))
	case u.User != nil:
		return nil, Permanent(CodeInvalidRef, fmt.Errorf("ref %q: must not carry credentials", Clip(u.Redacted())))
	case u.Hostname() == "":
		return nil, Permanent(CodeInvalidRef, fmt.Errorf("ref %q: has no host", Clip(ref)))
	}
	return u, nil
}

func (h *HTTPS) get(ctx context.Context, u *url.URL, rangeHeader string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, Permanent(CodeInvalidRef, fmt.Errorf("ref %q: %w", Clip(u.Redacted()), err))
	}
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, transportError(u.Redacted(), err)
	}
	return resp, nil
}

// transportError classifies a failure to get a response: the egress policy
// refusing the address and an unknown host are permanent, the rest
// retryable.
func transportError(ref string, err error) error {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, egress.ErrForbidden):
		return Permanent(CodeRefHostNotAllowed, fmt.Errorf("read %s: %w", Clip(ref), err))
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Permanent(CodeInvalidRef, fmt.Errorf("read %s: host not found: %w", Clip(ref), err))
	}
	return Transient(CodeStorageUnavailable, fmt.Errorf("read %s: %w", Clip(ref), err))
}

func statusError(ref string, status int) error {
	err := fmt.Errorf("read %s: HTTP %d %s", Clip(ref), status, http.StatusText(status))
	switch {
	case status == http.StatusNotFound || status == http.StatusGone:
		return Permanent(CodeInputNotFound, err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return Permanent(CodeAccessDenied, err)
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return Transient(CodeStorageUnavailable, err)
	}
	return Permanent(CodeInvalidInput, err)
}

// httpObject reads the body of one GET in sequence and serves ReadAt with
// range requests (a server that ignores Range is a permanent error there).
type httpObject struct {
	// ctx is Open's: io.ReaderAt takes none, and an object lives no longer
	// than the call that opened it.
	ctx  context.Context
	h    *HTTPS
	u    *url.URL
	ref  string
	mu   sync.Mutex
	body io.ReadCloser
	size int64
}

func (o *httpObject) Size() int64 { return o.size }

func (o *httpObject) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.body.Read(p)
	if err != nil && err != io.EOF {
		err = readError(o.ref, err)
	}
	return n, err
}

func (o *httpObject) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.body.Close()
}

func (o *httpObject) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d", Clip(o.ref), off)
	}
	if o.size >= 0 && off >= o.size {
		return 0, io.EOF
	}
	resp, err := o.h.get(o.ctx, o.u, "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+int64(len(p))-1, 10))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		if resp.StatusCode == http.StatusOK {
			return 0, Permanent(CodeInvalidInput, fmt.Errorf("read %s at %d: the server ignores range requests", Clip(o.ref), off))
		}
		return 0, statusError(o.ref, resp.StatusCode)
	}
	n, err := io.ReadFull(resp.Body, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF // the range ran past the end
	} else if err != nil {
		err = readError(o.ref, err)
	}
	return n, err
}
