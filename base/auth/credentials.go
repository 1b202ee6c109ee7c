package auth

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// BearerToken sends a fixed token with every call (tools, tests). It does
// not insist on TLS: the embedded default talks plaintext on loopback.
type BearerToken string

var _ credentials.PerRPCCredentials = BearerToken("")

// GetRequestMetadata adds the Authorization header.
func (t BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so loopback plaintext works; production
// runs gRPC over TLS (LUCIUS_TLS_*), which protects the token.
func (BearerToken) RequireTransportSecurity() bool { return false }

// TokenFile sends the token held in a file, re-read when the file changes:
// a sidecar, the platform (e.g. a projected volume) or `make up` refreshes it
// before it expires, and the worker never restarts for a new token.
type TokenFile struct {
	path string

	mu      sync.Mutex
	token   string
	modTime time.Time
	checked time.Time
}

var _ credentials.PerRPCCredentials = (*TokenFile)(nil)

// NewTokenFile reads path now, so a missing or empty file fails at start.
func NewTokenFile(path string) (*TokenFile, error) {
	t := &TokenFile{path: path}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

// GetRequestMetadata adds the Authorization header with the file's token.
func (t *TokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is described with BearerToken.
func (*TokenFile) RequireTransportSecurity() bool { return false }

func (t *TokenFile) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Since(t.checked) < time.Second {
		return t.token, nil
	}
	t.checked = time.Now()
	st, err := os.Stat(t.path)
	if err != nil {
		if t.token != "" {
			return t.token, nil // keep the last token while the file is being replaced
		}
		return "", fmt.Errorf("token file: %w", err)
	}
	if st.ModTime().Equal(t.modTime) && t.token != "" {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", t.path)
	}
	t.token, t.modTime = tok, st.ModTime()
	return t.token, nil
}
