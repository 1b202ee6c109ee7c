package reconciler

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The example the Standard Webhooks specification publishes.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// rotatedSecret is a second secret, as during a rotation.
	rotatedSecret = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
)

func TestSignWebhookMatchesTheSpecificationExample(t *testing.T) {
	t.Parallel()
	h, err := signWebhook([]string{specSecret}, specID, time.Unix(specTimestamp, 0), []byte(specBody))
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("webhook-id") != specID || h.Get("webhook-timestamp") != "1614265330" || h.Get("webhook-signature") != specSignature {
		t.Fatalf("headers %v, want id %s timestamp %d signature %s", h, specID, specTimestamp, specSignature)
	}
}

// During a rotation both secrets sign: a receiver holding either one
// verifies the delivery, one holding neither does not.
func TestSignWebhookSignsWithEveryActiveSecret(t *testing.T) {
	t.Parallel()
	body := []byte(`{"job_id":"j","status":"SUCCEEDED"}`)
	h, err := signWebhook([]string{specSecret, rotatedSecret}, "completion/j", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	sigs := strings.Split(h.Get("webhook-signature"), " ")
	if len(sigs) != 2 {
		t.Fatalf("signature header %q, want two signatures", h.Get("webhook-signature"))
	}
	for i, secret := range []string{specSecret, rotatedSecret} {
		// By hand, as the specification describes it.
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte("completion/j." + h.Get("webhook-timestamp") + "." + string(body)))
		if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); sigs[i] != want {
			t.Errorf("signature %d = %s, want %s", i, sigs[i], want)
		}
		// And as a receiver using the reference library does.
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("a receiver holding secret %d: %v", i+1, err)
		}
		if err := wh.Verify([]byte(`{"job_id":"j","status":"FAILED"}`), h); err == nil {
			t.Errorf("a changed body verified with secret %d", i+1)
		}
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("some-other-secret-of-32-bytes!!!")))
	if err := other.Verify(body, h); err == nil {
		t.Error("a receiver holding another secret verified the delivery")
	}
}

func TestSignWebhookRefusesAMalformedSecretWithoutRevealingIt(t *testing.T) {
	t.Parallel()
	_, err := signWebhook([]string{specSecret, "whsec_not*base64!"}, "id", time.Now(), nil)
	if err == nil || !strings.Contains(err.Error(), "secret 2") || strings.Contains(err.Error(), "not*base64") {
		t.Fatalf("malformed secret: %v", err)
	}
}

// Whatever the secret and body, a signature either fails to build or
// verifies with the reference library.
func FuzzSignWebhook(f *testing.F) {
	f.Add(specSecret, specBody)
	f.Add(rotatedSecret, "")
	f.Add("whsec_", "{}")
	f.Add("whsec_====", "x")
	f.Fuzz(func(t *testing.T, secret, body string) {
		h, err := signWebhook([]string{secret}, "completion/x", time.Now(), []byte(body))
		if err != nil {
			return
		}
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatalf("signed with %q, which the library cannot load: %v", secret, err)
		}
		if err := wh.Verify([]byte(body), http.Header(h)); err != nil {
			t.Fatalf("own signature does not verify: %v", err)
		}
	})
}
