package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Secrets are a kind prefix and 32 random bytes in unpadded base64url: the
// prefix tells a ticket from a session id at a glance (and in a leak
// scanner), the 256 bits make guessing hopeless. Only their SHA-256 is
// stored, so a read of the tables yields nothing usable.
const (
	ticketPrefix  = "lct_"
	sessionPrefix = "lcs_"
	secretBytes   = 32
)

var errMalformed = errors.New("malformed secret")

// newSecret returns a fresh secret of the kind prefix.
func newSecret(prefix string) string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseSecret checks that s is a secret of the kind prefix and returns the
// hash it is stored under. Anything else is refused before a query runs.
func parseSecret(prefix, s string) ([]byte, error) {
	body, ok := strings.CutPrefix(s, prefix)
	if !ok || len(body) != base64.RawURLEncoding.EncodedLen(secretBytes) {
		return nil, errMalformed
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil || len(raw) != secretBytes {
		return nil, errMalformed
	}
	sum := sha256.Sum256([]byte(s))
	return sum[:], nil
}

// csrfToken is the double-submit token of a session: derived from the
// session id, so the server keeps no second secret, and useless without the
// HttpOnly cookie it is derived from (and that another site cannot read).
func csrfToken(session string) string {
	mac := hmac.New(sha256.New, []byte(session))
	mac.Write([]byte("lucius console csrf v1"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validCSRF reports whether header is the CSRF token of session, in
// constant time; a malformed session never validates.
func validCSRF(session, header string) bool {
	if _, err := parseSecret(sessionPrefix, session); err != nil || header == "" {
		return false
	}
	return hmac.Equal([]byte(csrfToken(session)), []byte(header))
}
