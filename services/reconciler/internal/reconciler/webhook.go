package reconciler

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks headers a signed completion callback carries.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

// signWebhook signs a delivery per Standard Webhooks: HMAC-SHA256 over
// "<id>.<unix seconds>.<body>" with each secret ("whsec_" + base64 key),
// one "v1,<base64>" signature per secret, space-separated, so a receiver
// holding either secret of a rotation verifies it. It returns the three
// headers; at is the delivery attempt's time, so a retry is signed afresh
// and passes the receiver's timestamp tolerance.
func signWebhook(secrets []string, id string, at time.Time, body []byte) (http.Header, error) {
	sigs := make([]string, 0, len(secrets))
	for i, secret := range secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			// The error names the secret's position, never its value.
			return nil, fmt.Errorf("webhook secret %d: %w", i+1, err)
		}
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			return nil, fmt.Errorf("sign with webhook secret %d: %w", i+1, err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(headerWebhookID, id)
	h.Set(headerWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(headerWebhookSignature, strings.Join(sigs, " "))
	return h, nil
}
