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

	"github.com/lucius-platform/lucius/base/egress"
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
	if resp.ContentLength < 0 {
		// Size is the object's length: a server that streams without
		// saying it cannot serve what reads by size or range.
		resp.Body.Close()
		return nil, Permanent(CodeInvalidInput, fmt.Errorf("read %s: the server does not send the input's length (Content-Length)", Clip(ref)))
	}
	return &remoteObject{ref: ref, size: resp.ContentLength, body: resp.Body,
		// io.ReaderAt takes no context: ranges are fetched under Open's,
		// and an object lives no longer than the call that opened it.
		fetch:    func(off, n int64) (io.ReadCloser, error) { return h.fetchRange(ctx, u, ref, off, n) },
		classify: func(err error) error { return err },
	}, nil
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

// fetchRange GETs bytes [off, off+n) of u; a server that ignores Range is
// a permanent error.
func (h *HTTPS) fetchRange(ctx context.Context, u *url.URL, ref string, off, n int64) (io.ReadCloser, error) {
	resp, err := h.get(ctx, u, "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil, Permanent(CodeInvalidInput, fmt.Errorf("read %s at %d: the server ignores range requests", Clip(ref), off))
		}
		return nil, statusError(ref, resp.StatusCode)
	}
	return resp.Body, nil
}
