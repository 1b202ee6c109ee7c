package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Attempt names the attempt a callback token is bound to.
type Attempt struct {
	JobID      string `json:"job"`
	StepID     string `json:"step"`
	AttemptNo  int    `json:"attempt"`
	LeaseID    string `json:"lease"`
	OwnerEpoch int64  `json:"epoch"`
	// Service is the worker service the directive is addressed to.
	Service string `json:"svc"`
}

// Reasons a callback token is refused, recorded in CALLBACK_REFUSED events.
const (
	RefusedMissing      = "TOKEN_MISSING"
	RefusedMalformed    = "TOKEN_MALFORMED"
	RefusedSignature    = "TOKEN_SIGNATURE_INVALID"
	RefusedExpired      = "TOKEN_EXPIRED"
	RefusedOtherAttempt = "TOKEN_FOR_ANOTHER_ATTEMPT"
	RefusedService      = "SERVICE_NOT_HELD"
)

// CallbackRefusal says why a callback was refused.
type CallbackRefusal struct {
	Reason string
	Detail string
}

func (r *CallbackRefusal) Error() string { return r.Reason + ": " + r.Detail }

// CallbackKeys sign and verify callback tokens (HMAC-SHA256). The first key
// signs; every key verifies, so keys rotate without refusing tokens in
// flight: add the new key second, then move it first, then drop the old.
type CallbackKeys struct {
	keys []jose.JSONWebKey
}

// minCallbackKey is the shortest secret accepted (256 bits).
const minCallbackKey = 32

// ParseCallbackKeys reads one key a line, "key-id:base64-secret"; blank lines
// and lines starting with # are skipped.
func ParseCallbackKeys(text string) (*CallbackKeys, error) {
	k := &CallbackKeys{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, secret, ok := strings.Cut(line, ":")
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
		if !ok || strings.TrimSpace(id) == "" || err != nil || len(raw) < minCallbackKey {
			return nil, fmt.Errorf("callback key line %d: want key-id:base64 of at least %d random bytes", i+1, minCallbackKey)
		}
		k.keys = append(k.keys, jose.JSONWebKey{Key: raw, KeyID: strings.TrimSpace(id), Algorithm: string(jose.HS256)})
	}
	if len(k.keys) == 0 {
		return nil, errors.New("no callback key")
	}
	return k, nil
}

// LoadCallbackKeys reads a key file (ParseCallbackKeys).
func LoadCallbackKeys(path string) (*CallbackKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("callback keys: %w", err)
	}
	k, err := ParseCallbackKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("callback keys %s: %w", path, err)
	}
	return k, nil
}

// EnsureCallbackKeyFile creates a key file with one fresh key unless path
// exists (the embedded default's .lucius/secrets/callback-keys).
func EnsureCallbackKeyFile(path string) error {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("callback keys: %w", err)
	}
	_, err = fmt.Fprintf(f, "k%x:%s\n", id, base64.StdEncoding.EncodeToString(secret))
	return errors.Join(err, f.Close())
}

type callbackClaims struct {
	Attempt
	jwt.Claims
}

// Sign returns a token for a, valid until expires.
func (k *CallbackKeys) Sign(a Attempt, now, expires time.Time) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: k.keys[0]}, nil)
	if err != nil {
		return "", err
	}
	return jwt.Signed(signer).Claims(callbackClaims{Attempt: a, Claims: jwt.Claims{
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(expires)}}).Serialize()
}

// Verify checks raw's signature and expiry and returns the attempt it names.
func (k *CallbackKeys) Verify(raw string, now time.Time) (Attempt, error) {
	if strings.TrimSpace(raw) == "" {
		return Attempt{}, &CallbackRefusal{RefusedMissing, "the callback carries no callback_token"}
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.HS256})
	if err != nil || len(tok.Headers) != 1 {
		return Attempt{}, &CallbackRefusal{RefusedMalformed, "callback_token is not a signed token"}
	}
	var c callbackClaims
	verified := false
	for _, key := range k.keys {
		if kid := tok.Headers[0].KeyID; kid != "" && kid != key.KeyID {
			continue
		}
		if err := tok.Claims(key.Key, &c); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Attempt{}, &CallbackRefusal{RefusedSignature, "callback_token was not signed by Lucius"}
	}
	if c.Expiry == nil || now.After(c.Expiry.Time()) {
		return c.Attempt, &CallbackRefusal{RefusedExpired, "callback_token expired"}
	}
	return c.Attempt, nil
}

// CheckCallback decides whether p may send a callback for want with token
// raw: the token is Lucius's, unexpired, names exactly this attempt (job,
// step, attempt number, lease), and p serves the directive's service.
func (k *CallbackKeys) CheckCallback(p *Principal, raw string, want Attempt, now time.Time) (Attempt, error) {
	got, err := k.Verify(raw, now)
	if err != nil {
		return got, err
	}
	if got.JobID != want.JobID || got.StepID != want.StepID || got.AttemptNo != want.AttemptNo || got.LeaseID != want.LeaseID {
		return got, &CallbackRefusal{RefusedOtherAttempt, fmt.Sprintf(
			"callback_token is for %s/%s attempt %d", got.JobID, got.StepID, got.AttemptNo)}
	}
	if !p.Serves(got.Service) {
		return got, &CallbackRefusal{RefusedService, fmt.Sprintf("%s does not serve %q", p, got.Service)}
	}
	return got, nil
}

// GenerateCallbackKeys returns one fresh random key, for a single process
// (tests, tools); services that share tokens load a key file instead.
func GenerateCallbackKeys() (*CallbackKeys, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return ParseCallbackKeys("generated:" + base64.StdEncoding.EncodeToString(secret))
}
