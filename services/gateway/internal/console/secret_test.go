package console

import (
	"strings"
	"testing"
)

func TestParseSecretAcceptsOnlyWellFormedSecretsOfItsKind(t *testing.T) {
	t.Parallel()
	ticket, session := newSecret(ticketPrefix), newSecret(sessionPrefix)
	for _, tt := range []struct {
		name, prefix, secret string
		ok                   bool
	}{
		{"a fresh ticket", ticketPrefix, ticket, true},
		{"a fresh session", sessionPrefix, session, true},
		{"a session where a ticket is expected", ticketPrefix, session, false},
		{"a ticket where a session is expected", sessionPrefix, ticket, false},
		{"empty", ticketPrefix, "", false},
		{"the prefix alone", ticketPrefix, ticketPrefix, false},
		{"one character short", ticketPrefix, ticket[:len(ticket)-1], false},
		{"one character long", ticketPrefix, ticket + "A", false},
		{"padded base64", ticketPrefix, ticket[:len(ticket)-1] + "=", false},
		{"standard base64 alphabet", ticketPrefix, ticketPrefix + strings.Repeat("+", 43), false},
		{"non-canonical last character", ticketPrefix, ticketPrefix + strings.Repeat("A", 42) + "B", false},
		{"upper-case prefix", ticketPrefix, strings.ToUpper(ticketPrefix) + ticket[len(ticketPrefix):], false},
		{"surrounding space", ticketPrefix, " " + ticket, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hash, err := parseSecret(tt.prefix, tt.secret)
			if (err == nil) != tt.ok {
				t.Fatalf("parseSecret(%q) = %v, want ok=%t", tt.secret, err, tt.ok)
			}
			if tt.ok && len(hash) != 32 {
				t.Fatalf("hash of %d bytes", len(hash))
			}
		})
	}
}

func TestSecretsAreFreshAndStoredOnlyAsTheirHash(t *testing.T) {
	t.Parallel()
	a, b := newSecret(sessionPrefix), newSecret(sessionPrefix)
	if a == b {
		t.Fatal("two secrets are equal")
	}
	ha, _ := parseSecret(sessionPrefix, a)
	hb, _ := parseSecret(sessionPrefix, b)
	if string(ha) == string(hb) || strings.Contains(string(ha), a[len(sessionPrefix):]) {
		t.Fatal("hashes collide or contain the secret")
	}
}

func TestCSRFTokenIsBoundToItsSession(t *testing.T) {
	t.Parallel()
	session, other := newSecret(sessionPrefix), newSecret(sessionPrefix)
	token := csrfToken(session)
	for _, tt := range []struct {
		name, session, header string
		ok                    bool
	}{
		{"the session's token", session, token, true},
		{"no header", session, "", false},
		{"another session's token", session, csrfToken(other), false},
		{"the session id itself", session, session, false},
		{"a truncated token", session, token[:len(token)-1], false},
		{"a malformed session with its derived token", "lcs_short", csrfToken("lcs_short"), false},
		{"a ticket with its derived token", newSecret(ticketPrefix), "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := validCSRF(tt.session, tt.header); got != tt.ok {
				t.Fatalf("validCSRF = %t, want %t", got, tt.ok)
			}
		})
	}
	if csrfToken(session) != token {
		t.Fatal("a session's token changes")
	}
}

// FuzzSecretChecks: neither check panics; a secret is accepted only in its
// canonical form, and a CSRF header validates only as its session's token.
func FuzzSecretChecks(f *testing.F) {
	f.Add(newSecret(sessionPrefix), "")
	f.Add(newSecret(ticketPrefix), "x")
	s := newSecret(sessionPrefix)
	f.Add(s, csrfToken(s))
	f.Add("lcs_"+strings.Repeat("_", 43), "")
	f.Fuzz(func(t *testing.T, secret, header string) {
		_, terr := parseSecret(ticketPrefix, secret)
		_, serr := parseSecret(sessionPrefix, secret)
		if terr == nil && serr == nil {
			t.Fatalf("%q parses as both kinds", secret)
		}
		if serr == nil && (!strings.HasPrefix(secret, sessionPrefix) || len(secret) != len(sessionPrefix)+43) {
			t.Fatalf("accepted non-canonical session %q", secret)
		}
		if validCSRF(secret, header) && (serr != nil || header != csrfToken(secret)) {
			t.Fatalf("validCSRF(%q, %q) accepted a header that is not the session's token", secret, header)
		}
		if serr == nil && !validCSRF(secret, csrfToken(secret)) {
			t.Fatalf("the token of session %q does not validate", secret)
		}
	})
}
