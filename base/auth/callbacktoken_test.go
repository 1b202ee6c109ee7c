package auth

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func TestCallbackTokens(t *testing.T) {
	t.Parallel()
	keys, err := GenerateCallbackKeys()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := GenerateCallbackKeys()
	now := time.Now()
	attempt := Attempt{JobID: "j1", StepID: "ocr", AttemptNo: 2, LeaseID: "l1", OwnerEpoch: 3, Service: "ocr"}
	valid, err := keys.Sign(attempt, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	expired, _ := keys.Sign(attempt, now.Add(-time.Hour), now.Add(-time.Second))
	foreign, _ := other.Sign(attempt, now, now.Add(time.Minute))
	worker := &Principal{Roles: []Role{RoleWorker}, Services: []string{"ocr"}}
	for _, tc := range []struct {
		name   string
		p      *Principal
		token  string
		want   Attempt
		reason string
	}{
		{"valid", worker, valid, attempt, ""},
		{"missing", worker, "", attempt, RefusedMissing},
		{"garbage", worker, "not.a.token", attempt, RefusedMalformed},
		{"signed by another key", worker, foreign, attempt, RefusedSignature},
		{"tampered", worker, valid[:len(valid)-4] + "AAAA", attempt, RefusedSignature},
		{"expired", worker, expired, attempt, RefusedExpired},
		{"other lease", worker, valid, Attempt{JobID: "j1", StepID: "ocr", AttemptNo: 2, LeaseID: "l2"}, RefusedOtherAttempt},
		{"other attempt", worker, valid, Attempt{JobID: "j1", StepID: "ocr", AttemptNo: 3, LeaseID: "l1"}, RefusedOtherAttempt},
		{"other job", worker, valid, Attempt{JobID: "j2", StepID: "ocr", AttemptNo: 2, LeaseID: "l1"}, RefusedOtherAttempt},
		{"worker of another service", &Principal{Roles: []Role{RoleWorker}, Services: []string{"sis"}}, valid, attempt, RefusedService},
		{"a partner", &Principal{Roles: []Role{RolePartner}, Tenants: []string{"acme"}}, valid, attempt, RefusedService},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keys.CheckCallback(tc.p, tc.token, tc.want, now)
			var refusal *CallbackRefusal
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.reason == "" && got != attempt:
				t.Fatalf("attempt %+v, want %+v", got, attempt)
			case tc.reason != "" && (!errors.As(err, &refusal) || refusal.Reason != tc.reason):
				t.Fatalf("err %v, want refusal %s", err, tc.reason)
			}
		})
	}
}

func TestCallbackKeysRotate(t *testing.T) {
	t.Parallel()
	oldKeys, err := ParseCallbackKeys("old:" + b64(32, 1))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := ParseCallbackKeys("new:" + b64(32, 2) + "\n# the old key still verifies\nold:" + b64(32, 1))
	if err != nil {
		t.Fatal(err)
	}
	a := Attempt{JobID: "j", StepID: "s", AttemptNo: 1, LeaseID: "l", Service: "ocr"}
	tok, _ := oldKeys.Sign(a, time.Now(), time.Now().Add(time.Minute))
	if _, err := rotated.Verify(tok, time.Now()); err != nil {
		t.Fatalf("a token of the old key after rotation: %v", err)
	}
	fresh, _ := rotated.Sign(a, time.Now(), time.Now().Add(time.Minute))
	if _, err := oldKeys.Verify(fresh, time.Now()); err == nil {
		t.Fatal("the old key set verified a token of the new key")
	}
}

func TestParseCallbackKeysRefusesWeakKeys(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "# only a comment", "k:" + b64(16, 1), "k:not-base64!", ":" + b64(32, 1), "noseparator"} {
		if _, err := ParseCallbackKeys(text); err == nil {
			t.Errorf("ParseCallbackKeys(%q) accepted", text)
		}
	}
}

func b64(n int, fill byte) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = fill
	}
	return base64Std(b)
}

func FuzzCallbackTokenVerify(f *testing.F) {
	keys, _ := ParseCallbackKeys("k:" + b64(32, 7))
	now := time.Unix(1_800_000_000, 0)
	good, _ := keys.Sign(Attempt{JobID: "j", StepID: "s", AttemptNo: 1, LeaseID: "l", Service: "ocr"}, now, now.Add(time.Hour))
	for _, seed := range []string{good, "", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", good + "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := keys.Verify(raw, now)
		if err == nil && raw != good {
			// Only a token this key signed verifies: anything else that does must decode to the same claims.
			if a.JobID != "j" || a.LeaseID != "l" {
				t.Fatalf("verified a token Lucius did not sign: %q → %+v", raw, a)
			}
		}
	})
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
