package reconciler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/retry"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
)

// CallbackConfig tunes the delivery of completion callbacks.
type CallbackConfig struct {
	BatchSize   int           // messages claimed per round (default 50)
	Concurrency int           // POSTs at once (default 8)
	Timeout     time.Duration // per POST (default 10s)
	// MaxAttempts before giving up (default 10); the backoff doubles from
	// InitialBackoff (default 2s) up to MaxBackoff (default 5m).
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	PollInterval   time.Duration // fallback when no notification arrives (default 1s)
}

func (c *CallbackConfig) defaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 50
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.InitialBackoff == 0 {
		c.InitialBackoff = 2 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
}

// backoff is the delay after the n-th failed delivery.
func (c CallbackConfig) backoff(n int) time.Duration {
	return retry.Delay(c.InitialBackoff, c.MaxBackoff, 2, 0, n-1)
}

// deliverer POSTs completion callbacks ({job_id, status, result_url}, seed
// 001 §13.2) from the outbox to each job's callback_url, retrying with
// backoff, signed per Standard Webhooks with the tenant's webhook secrets as
// the live configuration holds them at each attempt. Every attempt is
// recorded as a CALLBACK_DELIVERY event of the job. A 2xx answer delivers;
// 408, 429, 5xx and network errors are retried; another 4xx means the
// callback will never be accepted, and it is abandoned at once, as is a
// callback whose tenant has no webhook secret (NO_WEBHOOK_SECRET: never sent
// unsigned) or whose address the egress policy forbids (ADDRESS_FORBIDDEN).
type deliverer struct {
	store *ledger.Store
	cfg   CallbackConfig
	// secrets returns a tenant's webhook secrets (none: do not deliver).
	secrets func(tenant string) []string
	client  *http.Client
	now     func() time.Time
	log     *slog.Logger
	sent    metric.Int64Counter
}

func newDeliverer(store *ledger.Store, cfg CallbackConfig, egressPolicy egress.Policy, secrets func(tenant string) []string,
	log *slog.Logger) (*deliverer, error) {
	cfg.defaults()
	sent, err := otel.Meter("lucius/reconciler").Int64Counter("lucius_completion_callbacks_total",
		metric.WithDescription("Completion callback deliveries, by outcome (delivered, retry, abandoned)."))
	if err != nil {
		return nil, err
	}
	client := egressPolicy.Client(cfg.Timeout, func(rt http.RoundTripper) http.RoundTripper { return otelhttp.NewTransport(rt) })
	return &deliverer{store: store, cfg: cfg, secrets: secrets, client: client, now: time.Now, log: log, sent: sent}, nil
}

// liveSecrets reads tenants' webhook secrets from the live configuration.
func liveSecrets(live *config.Watcher) func(string) []string {
	return func(tenant string) []string { return live.Current().Tenants[routing.Normalize(tenant)].WebhookSecrets }
}

func (d *deliverer) run(ctx context.Context, wake <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		msgs, err := d.store.ClaimOutbox(ctx, ledger.OutboxClaim{Limit: d.cfg.BatchSize,
			Lease: d.cfg.Timeout + 30*time.Second, Kinds: []string{ledger.KindCompletion}})
		if err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "claim completion callbacks", telemetry.Err(err))
		}
		sem := make(chan struct{}, d.cfg.Concurrency)
		var wg sync.WaitGroup
		for _, m := range msgs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				d.deliver(ctx, m)
			}()
		}
		wg.Wait()
		timer.Reset(d.cfg.PollInterval)
	}
}

func (d *deliverer) deliver(ctx context.Context, m ledger.OutboxMessage) {
	log := d.log.With(telemetry.JobID(m.JobID), "url", m.Destination, "attempt", m.Attempts)
	status, err := d.post(ctx, m)
	event := ledger.Event{JobID: m.JobID, Type: ledger.EventCallbackDelivery,
		Data: map[string]any{"url": m.Destination, "attempt": m.Attempts, "http_status": status}}
	var outcome string
	switch {
	case errors.Is(err, errNoWebhookSecret):
		outcome, event.Reason = "abandoned", "NO_WEBHOOK_SECRET"
		d.abandon(ctx, m, err.Error(), log)
	case errors.Is(err, egress.ErrForbidden):
		outcome, event.Reason = "abandoned", "ADDRESS_FORBIDDEN"
		d.abandon(ctx, m, err.Error(), log)
	case err == nil && status >= 200 && status < 300:
		outcome, event.Reason = "delivered", "DELIVERED"
		if err := d.store.MarkSent(ctx, []ledger.OutboxMessage{m}); err != nil {
			log.WarnContext(ctx, "mark callback delivered; it may be delivered again", telemetry.Err(err))
		}
	case err == nil && status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		outcome, event.Reason = "abandoned", "REJECTED"
		d.abandon(ctx, m, fmt.Sprintf("callback_url answered %d", status), log)
	case m.Attempts >= d.cfg.MaxAttempts:
		outcome, event.Reason = "abandoned", "GAVE_UP"
		d.abandon(ctx, m, fmt.Sprintf("no success after %d attempts: %s", m.Attempts, describe(status, err)), log)
	default:
		outcome, event.Reason = "retry", "RETRY"
		wait := d.cfg.backoff(m.Attempts)
		event.Data["retry_in_seconds"] = wait.Seconds()
		if rerr := d.store.ReleaseOutbox(ctx, m.ID, describe(status, err), wait); rerr != nil {
			log.WarnContext(ctx, "release callback", telemetry.Err(rerr))
		}
	}
	if err != nil {
		event.Data["error"] = err.Error()
	}
	if rerr := d.store.RecordEvents(ctx, event); rerr != nil {
		log.WarnContext(ctx, "record callback delivery", telemetry.Err(rerr))
	}
	d.sent.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	log.InfoContext(ctx, "completion callback "+outcome, "http_status", status, telemetry.Err(err))
}

// errNoWebhookSecret: the job's tenant has no webhook secret to sign with.
var errNoWebhookSecret = errors.New("the tenant has no webhook secret (tenant configuration webhook_secrets); completion webhooks are never sent unsigned")

func (d *deliverer) post(ctx context.Context, m ledger.OutboxMessage) (int, error) {
	tenant := m.Properties["tenant_id"]
	if tenant == "" { // queued before completion messages named their tenant
		job, err := d.store.GetJob(ctx, m.JobID)
		if err != nil {
			return 0, fmt.Errorf("look up the job's tenant: %w", err)
		}
		tenant = job.TenantID
	}
	secrets := d.secrets(tenant)
	if len(secrets) == 0 {
		return 0, errNoWebhookSecret
	}
	headers, err := signWebhook(secrets, m.MessageID, d.now(), m.Body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Destination, bytes.NewReader(m.Body))
	if err != nil {
		return 0, err
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.MessageID) // the same callback may arrive twice
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

func (d *deliverer) abandon(ctx context.Context, m ledger.OutboxMessage, cause string, log *slog.Logger) {
	if err := d.store.AbandonOutbox(ctx, m.ID, cause); err != nil {
		log.WarnContext(ctx, "abandon callback", telemetry.Err(err))
	}
}

func describe(status int, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("HTTP %d", status)
}
