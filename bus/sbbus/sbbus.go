// Package sbbus is the Azure Service Bus implementation of package bus, on the
// official Go SDK (azservicebus for messaging over AMQP, azservicebus/admin for
// the management REST API). It passes the same conformance suite as pgbus,
// run against a Service-Bus-compatible test broker (package sbtest).
//
// # Mapping
//
// Queues and topics are Service Bus queues and topics, created with
// RequiresDuplicateDetection and the options' DuplicateDetectionHistoryTimeWindow,
// so a re-sent MessageId within the window is dropped by Service Bus itself. A
// subscription's correlation filter is a correlation-filter rule named
// "lucius-filter" on the message's application properties (a TrueFilter when
// the filter is empty) that replaces the "$Default" rule; EnsureSubscription
// creates the subscription with that rule and, on a second declaration,
// updates the subscription and the rule and removes "$Default". Receivers use
// peek-lock: Complete, Abandon and DeadLetter (reason, description) are the
// SDK's settlements, RenewLock is the $management renew-lock operation, and
// DLQ sources are the "$deadletterqueue" sub-queues. Message.Key is the
// partition key, ScheduledAt the scheduled enqueue time, TTL the message's
// time to live; Properties (trace context included) are application
// properties. The SDK's lock-lost, not-found and closed errors become
// bus.ErrLockLost, bus.ErrNotFound and bus.ErrClosed.
//
// A settled message stays settled: a second settlement or renewal returns
// bus.ErrLockLost without asking Service Bus (the AMQP link would accept it
// silently).
//
// # Locks
//
// As with pgbus, a lock lasts the entity's LockDuration from delivery and is
// extended only by RenewLock: a handler that runs longer must renew, for
// example with KeepLock. The SDK's own auto-renewal is not used.
//
// # Batches
//
// Send packs the messages into azservicebus message batches. A batch is one
// AMQP transfer, which Service Bus enqueues atomically: all of its messages or
// none. A batch is limited by the link's maximum message size (256 KB on the
// Standard tier, 1 MB and up on Premium), so a Send whose messages do not fit
// one batch is split into several, each atomic on its own; if a later one
// fails, the earlier ones stay sent and Send returns the error. The outbox
// keeps delivery exactly-once in effect anyway: it re-sends every message it
// has not seen confirmed, with the same MessageId, and duplicate detection
// drops those that had already been enqueued within the detection window.
//
// # Provisioning
//
// By default Ensure* create or update entities through the admin client,
// which needs the Azure Service Bus Data Owner role (or a Manage SAS rule).
// With Config.SkipProvisioning (LUCIUS_SERVICEBUS_PROVISION=false) entities
// are managed elsewhere (Bicep, Terraform, the emulator's config file) and
// Ensure* only check over AMQP that they exist, returning bus.ErrNotFound
// otherwise: a queue or subscription by peeking (Listen), a topic (or a queue
// the caller may only send to) by attaching a sender link (Send). Then Data
// Sender and Data Receiver suffice; an entity neither right reaches is assumed
// to exist, with a warning. Config.AdminEndpoint
// (LUCIUS_SERVICEBUS_ADMIN_ENDPOINT) sends the admin client to a plain-HTTP
// management endpoint such as the emulator's; the test broker serves the
// management API too, so tests provision as production does.
//
// # Metrics and traces
//
// The Bus reports the metrics of package bustel (lucius_bus_*) and its send
// and receive spans as pgbus does, with messaging.system "servicebus": a
// send puts its span's trace context in the application properties of the
// messages that carry none, and a receive span (the SDK's receive call, its
// wait for a message included) links to each message's.
// Messages dead-lettered by Service Bus itself (MaxDeliveryCountExceeded,
// TTLExpiredException) and expired messages dropped never pass through the
// adapter: bustel.MetricDeadLettered counts only reason "application", and
// bustel.MetricExpired stays at zero; the dead-letter queues' depth shows the
// rest.
//
// The depth gauges cover every queue, topic and subscription the Bus has
// declared (Ensure*) or received from, not the whole namespace: each process
// reports the entities it uses, so aggregate with max across processes. A
// reading takes, per queue or subscription, one GET of its runtime
// properties from the management API (active, scheduled and dead-letter
// counts) and, for it and its dead-letter queue when they hold messages, a
// peek of up to 10 messages (rarely more: up to 3 pages while it finds only
// scheduled ones) for the oldest active message's age, which Service Bus
// does not report; per topic, one GET for the messages scheduled to it, which
// Service Bus keeps in the topic until their time (a subscription's scheduled
// count is always 0). A reading is reused for Config.DepthInterval (10s), so
// scrapes by several collectors cost one reading, and is bounded by
// bustel.DepthTimeout. Reading runtime properties needs the Manage right: a
// Bus refused it (SkipProvisioning with only Data Sender and Receiver) logs a
// warning once and reports no depth.
package sbbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
)

// The environment variables of a Config; package busconfig reads them.
const (
	EnvConnectionString = "LUCIUS_SERVICEBUS_CONNECTION_STRING"
	EnvNamespace        = "LUCIUS_SERVICEBUS_NAMESPACE"
	EnvProvision        = "LUCIUS_SERVICEBUS_PROVISION"
	EnvAdminEndpoint    = "LUCIUS_SERVICEBUS_ADMIN_ENDPOINT"
)

// FilterRuleName is the name of the rule that carries a subscription's filter.
const FilterRuleName = "lucius-filter"

// Config configures a Bus. Exactly one of ConnectionString and Namespace is set.
type Config struct {
	// ConnectionString authenticates with a shared access key
	// ("Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…"). The
	// emulator and the test broker take UseDevelopmentEmulator=true, which
	// makes the SDK speak plain AMQP and keeps the endpoint's port.
	ConnectionString string
	// Namespace is the fully qualified namespace (name.servicebus.windows.net),
	// authenticated with Credential.
	Namespace string
	// Credential for Namespace. Default: azidentity.DefaultAzureCredential
	// (workload identity, managed identity, az login, environment).
	Credential azcore.TokenCredential
	// SkipProvisioning makes Ensure* check over AMQP that entities exist
	// instead of creating or updating them (LUCIUS_SERVICEBUS_PROVISION=false).
	SkipProvisioning bool
	// AdminEndpoint, when set, sends the management REST API to this base URL
	// (an emulator's or the test broker's plain-HTTP management endpoint)
	// instead of https://<namespace>/ (LUCIUS_SERVICEBUS_ADMIN_ENDPOINT).
	AdminEndpoint string
	// Logger receives warnings. Default: slog.Default().
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive the bus's metrics
	// (bustel.Metric* names) and its send and receive spans. Default: the
	// OpenTelemetry globals.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Propagator writes trace context into the application properties of
	// messages sent and reads it from those received. Default: the
	// OpenTelemetry global (W3C trace context and baggage once package
	// telemetry has set up the process).
	Propagator propagation.TextMapPropagator
	// DepthInterval is how long a reading of the depth gauges (runtime
	// properties and peeks, see the package doc) is reused. Default
	// DefaultDepthInterval; negative: no depth gauges.
	DepthInterval time.Duration
}

// system is the attribute messaging.system of the spans: OpenTelemetry's
// name for Azure Service Bus.
const system = "servicebus"

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.ConnectionString == "" && c.Namespace == "":
		return fmt.Errorf("sbbus: set %s or %s", EnvConnectionString, EnvNamespace)
	case c.ConnectionString != "" && c.Namespace != "":
		return fmt.Errorf("sbbus: set only one of %s and %s", EnvConnectionString, EnvNamespace)
	case strings.Contains(c.Namespace, "/"):
		return fmt.Errorf("sbbus: namespace %q must be a host name such as name.servicebus.windows.net", c.Namespace)
	}
	if c.AdminEndpoint != "" {
		if u, err := url.Parse(c.AdminEndpoint); err != nil || u.Host == "" {
			return fmt.Errorf("sbbus: admin endpoint %q is not a base URL", c.AdminEndpoint)
		}
	}
	return nil
}

// Bus is a connection to a Service Bus namespace.
type Bus struct {
	client    *azservicebus.Client
	admin     *admin.Client
	provision bool
	log       *slog.Logger
	tel       *bustel.Instruments
	depth     *depthReader // nil: no depth gauges

	mu        sync.Mutex
	closed    bool
	done      chan struct{}
	senders   map[*sender]struct{}
	receivers map[*receiver]struct{}
}

var _ bus.Bus = (*Bus)(nil)

// New connects to Service Bus. Connections open lazily, on first use.
func New(cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var adminOpts admin.ClientOptions
	if cfg.AdminEndpoint != "" {
		base, _ := url.Parse(cfg.AdminEndpoint)
		adminOpts.Transport = redirect{base: base}
	}
	b := &Bus{
		provision: !cfg.SkipProvisioning,
		log:       cfg.Logger,
		done:      make(chan struct{}),
		senders:   map[*sender]struct{}{},
		receivers: map[*receiver]struct{}{},
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if err := b.connect(cfg, &adminOpts); err != nil {
		return nil, err
	}
	telCfg := bustel.Config{System: system, MeterProvider: cfg.MeterProvider,
		TracerProvider: cfg.TracerProvider, Propagator: cfg.Propagator}
	if cfg.DepthInterval >= 0 {
		b.depth = newDepthReader(b, orDefault(cfg.DepthInterval, DefaultDepthInterval))
		telCfg.Depth = b.depth.read
	}
	var err error
	if b.tel, err = bustel.New(telCfg); err != nil {
		return nil, fmt.Errorf("sbbus: %w", err)
	}
	return b, nil
}

// connect creates the messaging and admin clients.
func (b *Bus) connect(cfg Config, adminOpts *admin.ClientOptions) error {
	var err error
	if cfg.ConnectionString != "" {
		if b.client, err = azservicebus.NewClientFromConnectionString(cfg.ConnectionString, nil); err != nil {
			return fmt.Errorf("sbbus: %w", err)
		}
		if b.admin, err = admin.NewClientFromConnectionString(cfg.ConnectionString, adminOpts); err != nil {
			return fmt.Errorf("sbbus: admin client: %w", err)
		}
		return nil
	}
	cred := cfg.Credential
	if cred == nil {
		if cred, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
			return fmt.Errorf("sbbus: default Azure credential: %w", err)
		}
	}
	if b.client, err = azservicebus.NewClient(cfg.Namespace, cred, nil); err != nil {
		return fmt.Errorf("sbbus: %w", err)
	}
	if b.admin, err = admin.NewClient(cfg.Namespace, cred, adminOpts); err != nil {
		return fmt.Errorf("sbbus: admin client: %w", err)
	}
	return nil
}

// redirect sends the admin client's requests to another base URL (the SDK
// always builds https://<namespace>/ URLs).
type redirect struct{ base *url.URL }

func (r redirect) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
	req.Host = r.base.Host
	return http.DefaultClient.Do(req) //nolint:gosec // G704: the request goes to the namespace the operator configured (r.base)
}

// TxPublisher is nil: Service Bus cannot take part in a PostgreSQL
// transaction, so the outbox publishes after the producer's commit and
// duplicate detection drops a re-send (see the package doc on batches).
func (b *Bus) TxPublisher() bus.TxPublisher { return nil }

// Close closes every sender and receiver and the connection. Closing twice is harmless.
func (b *Bus) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	senders, receivers := b.senders, b.receivers
	b.senders, b.receivers = nil, nil
	b.mu.Unlock()
	if err := b.tel.Close(); err != nil {
		b.log.WarnContext(ctx, "sbbus: unregister the queue depth metrics", "err", err)
	}
	for s := range senders {
		s.Close(ctx) //nolint:errcheck // the client closes below
	}
	for r := range receivers {
		r.Close(ctx) //nolint:errcheck
	}
	if err := b.client.Close(ctx); err != nil {
		return fmt.Errorf("sbbus: close: %w", err)
	}
	return nil
}

func (b *Bus) isClosed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// ---------- admin ----------

// EnsureQueue creates a queue, or updates it to opts (bus.Admin).
func (b *Bus) EnsureQueue(ctx context.Context, name string, opts bus.QueueOptions) error {
	if b.isClosed() {
		return bus.ErrClosed
	}
	if !b.provision {
		return b.tracked(bus.QueueSource(name), b.checkExists(ctx, bus.QueueSource(name), name))
	}
	props := admin.QueueProperties{
		LockDuration:                        duration(orDefault(opts.LockDuration, bus.DefaultLockDuration)),
		MaxDeliveryCount:                    int32Ptr(orDefaultInt(opts.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)),
		DefaultMessageTimeToLive:            duration(orDefault(opts.DefaultTTL, bus.DefaultTTL)),
		DeadLetteringOnMessageExpiration:    &opts.DeadLetterOnExpiration,
		RequiresDuplicateDetection:          boolPtr(true),
		DuplicateDetectionHistoryTimeWindow: duration(orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)),
	}
	_, err := b.admin.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: &props})
	if statusCode(err) == http.StatusConflict {
		_, err = b.admin.UpdateQueue(ctx, name, props, nil)
	}
	return b.tracked(bus.QueueSource(name), mapErr("ensure queue "+name, err))
}

// EnsureTopic creates a topic, or updates it to opts (bus.Admin).
func (b *Bus) EnsureTopic(ctx context.Context, name string, opts bus.TopicOptions) error {
	if b.isClosed() {
		return bus.ErrClosed
	}
	if !b.provision {
		return b.tracked(bus.Source{Topic: name}, b.checkExists(ctx, bus.Source{}, name))
	}
	props := admin.TopicProperties{
		DefaultMessageTimeToLive:            duration(orDefault(opts.DefaultTTL, bus.DefaultTTL)),
		RequiresDuplicateDetection:          boolPtr(true),
		DuplicateDetectionHistoryTimeWindow: duration(orDefault(opts.DuplicateDetectionWindow, bus.DefaultDuplicateDetection)),
	}
	_, err := b.admin.CreateTopic(ctx, name, &admin.CreateTopicOptions{Properties: &props})
	if statusCode(err) == http.StatusConflict {
		_, err = b.admin.UpdateTopic(ctx, name, props, nil)
	}
	return b.tracked(bus.Source{Topic: name}, mapErr("ensure topic "+name, err))
}

// EnsureSubscription creates a topic subscription with its filter, or updates it (bus.Admin).
func (b *Bus) EnsureSubscription(ctx context.Context, topic, name string, opts bus.SubscriptionOptions) error {
	if b.isClosed() {
		return bus.ErrClosed
	}
	what := "ensure subscription " + topic + "/" + name
	src := bus.SubscriptionSource(topic, name)
	if !b.provision {
		return b.tracked(src, b.checkExists(ctx, src, ""))
	}
	props := admin.SubscriptionProperties{
		LockDuration:                     duration(orDefault(opts.LockDuration, bus.DefaultLockDuration)),
		MaxDeliveryCount:                 int32Ptr(orDefaultInt(opts.MaxDeliveryCount, bus.DefaultMaxDeliveryCount)),
		DeadLetteringOnMessageExpiration: &opts.DeadLetterOnExpiration,
	}
	if opts.DefaultTTL > 0 {
		props.DefaultMessageTimeToLive = duration(opts.DefaultTTL)
	}
	filter := ruleFilter(opts.Filter)
	create := props
	create.DefaultRule = &admin.RuleProperties{Name: FilterRuleName, Filter: filter}
	_, err := b.admin.CreateSubscription(ctx, topic, name, &admin.CreateSubscriptionOptions{Properties: &create})
	if statusCode(err) != http.StatusConflict {
		return b.tracked(src, mapErr(what, err))
	}
	// It exists: update it and its rule. Concurrent declarers all end here.
	if _, err := b.admin.UpdateSubscription(ctx, topic, name, props, nil); err != nil {
		return mapErr(what, err)
	}
	_, err = b.admin.CreateRule(ctx, topic, name, &admin.CreateRuleOptions{Name: strPtr(FilterRuleName), Filter: filter})
	if statusCode(err) == http.StatusConflict {
		_, err = b.admin.UpdateRule(ctx, topic, name, admin.RuleProperties{Name: FilterRuleName, Filter: filter})
	}
	if err != nil {
		return mapErr(what+": filter rule", err)
	}
	if _, err := b.admin.DeleteRule(ctx, topic, name, "$Default", nil); err != nil && statusCode(err) != http.StatusNotFound {
		return mapErr(what+": remove $Default", err)
	}
	return b.tracked(src, nil)
}

// tracked adds src's entity to those whose depth the Bus reports unless err
// is set, and returns err.
func (b *Bus) tracked(src bus.Source, err error) error {
	if err == nil && b.depth != nil {
		src.DeadLetter = false
		b.depth.track(src)
	}
	return err
}

func ruleFilter(filter map[string]string) admin.RuleFilter {
	if len(filter) == 0 {
		return &admin.TrueFilter{}
	}
	props := make(map[string]any, len(filter))
	for k, v := range filter {
		props[k] = v
	}
	return &admin.CorrelationFilter{ApplicationProperties: props}
}

// checkExists tells whether an entity exists without the admin API (whose
// reads need the Manage right, and which the emulator may not serve): it peeks
// src when set (Listen), else opens a sender link to entity (Send). An entity
// these rights cannot reach is assumed to exist, with a warning: its first
// Send or Receive reports what is wrong.
func (b *Bus) checkExists(ctx context.Context, src bus.Source, entity string) error {
	var err error
	what := entity
	if src.Queue != "" || src.Topic != "" {
		what = src.Path()
		var r *azservicebus.Receiver
		if src.Topic != "" {
			r, err = b.client.NewReceiverForSubscription(src.Topic, src.Subscription, nil)
		} else {
			r, err = b.client.NewReceiverForQueue(src.Queue, nil)
		}
		if err == nil {
			_, err = r.PeekMessages(ctx, 1, nil)
			r.Close(context.Background()) //nolint:errcheck
		}
		if err == nil || !unauthorized(err) || entity == "" {
			return b.checked(what, err)
		}
	}
	s, err := b.client.NewSender(entity, nil)
	if err == nil {
		_, err = s.NewMessageBatch(ctx, nil) // attaches the link
		s.Close(context.Background())        //nolint:errcheck
	}
	return b.checked(what, err)
}

func (b *Bus) checked(what string, err error) error {
	if err != nil && unauthorized(err) {
		b.log.Warn("sbbus: cannot check that the entity exists; assuming it does", "entity", what, "err", err)
		return nil
	}
	return mapErr("check "+what, err)
}

func unauthorized(err error) bool {
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeUnauthorizedAccess {
		return true
	}
	var amqpErr *amqp.Error
	return errors.As(err, &amqpErr) && amqpErr.Condition == amqp.ErrCondUnauthorizedAccess
}

// ---------- senders ----------

// NewSender sends to a queue or topic. A missing entity shows on Send.
func (b *Bus) NewSender(ctx context.Context, entity string) (bus.Sender, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, bus.ErrClosed
	}
	s, err := b.client.NewSender(entity, nil)
	if err != nil {
		return nil, mapErr("new sender "+entity, err)
	}
	out := &sender{b: b, s: s, entity: entity, done: make(chan struct{})}
	b.senders[out] = struct{}{}
	return out, nil
}

type sender struct {
	b      *Bus
	s      *azservicebus.Sender
	entity string

	once sync.Once
	done chan struct{}
}

func (s *sender) closed() bool {
	select {
	case <-s.done:
		return true
	case <-s.b.done:
		return true
	default:
		return false
	}
}

// Send sends msgs in as few batches as fit (see the package doc on
// atomicity), in a span whose trace context the messages carry.
func (s *sender) Send(ctx context.Context, msgs ...bus.Message) error {
	if s.closed() {
		return bus.ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx, span, msgs := s.b.tel.StartSend(ctx, s.entity, msgs)
	err := s.send(ctx, msgs)
	bustel.EndSpan(span, err)
	return err
}

// send sends msgs in batches, counting each batch sent.
func (s *sender) send(ctx context.Context, msgs []bus.Message) error {
	batch, err := s.s.NewMessageBatch(ctx, nil)
	if err != nil {
		return s.err(err)
	}
	for i := range msgs {
		if msgs[i].ID == "" {
			return fmt.Errorf("sbbus: send to %s: message %d has no ID", s.entity, i)
		}
		m := toSDK(&msgs[i])
		err := batch.AddMessage(m, nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && batch.NumMessages() > 0 {
			if err := s.sendBatch(ctx, batch); err != nil {
				return err
			}
			if batch, err = s.s.NewMessageBatch(ctx, nil); err != nil {
				return s.err(err)
			}
			err = batch.AddMessage(m, nil)
		}
		if err != nil {
			return fmt.Errorf("sbbus: send to %s: message %s: %w", s.entity, msgs[i].ID, err)
		}
	}
	return s.sendBatch(ctx, batch)
}

func (s *sender) sendBatch(ctx context.Context, batch *azservicebus.MessageBatch) error {
	if err := s.s.SendMessageBatch(ctx, batch, nil); err != nil {
		return s.err(err)
	}
	s.b.tel.Sent(ctx, s.entity, int(batch.NumMessages()))
	return nil
}

func (s *sender) err(err error) error {
	if err != nil && s.closed() {
		return bus.ErrClosed
	}
	return mapErr("send to "+s.entity, err)
}

func (s *sender) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.done)
		s.b.mu.Lock()
		delete(s.b.senders, s)
		s.b.mu.Unlock()
		err = s.s.Close(ctx)
	})
	if err != nil && !s.b.isClosed() {
		return mapErr("close sender "+s.entity, err)
	}
	return nil
}

func toSDK(m *bus.Message) *azservicebus.Message {
	out := &azservicebus.Message{
		MessageID: strPtr(m.ID),
		Body:      m.Body,
	}
	if m.ContentType != "" {
		out.ContentType = strPtr(m.ContentType)
	}
	if m.CorrelationID != "" {
		out.CorrelationID = strPtr(m.CorrelationID)
	}
	if m.Subject != "" {
		out.Subject = strPtr(m.Subject)
	}
	if m.Key != "" {
		out.PartitionKey = strPtr(m.Key)
	}
	if !m.ScheduledAt.IsZero() {
		at := m.ScheduledAt.UTC()
		out.ScheduledEnqueueTime = &at
	}
	if m.TTL > 0 {
		ttl := m.TTL
		out.TimeToLive = &ttl
	}
	if len(m.Properties) > 0 {
		out.ApplicationProperties = make(map[string]any, len(m.Properties))
		for k, v := range m.Properties {
			out.ApplicationProperties[k] = v
		}
	}
	return out
}

// ---------- helpers ----------

// duration formats d as the ISO 8601 duration the management API takes, with
// fractional seconds (sub-second values are for tests; Service Bus has minimums).
func duration(d time.Duration) *string {
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	hours := d / time.Hour
	d -= hours * time.Hour
	minutes := d / time.Minute
	d -= minutes * time.Minute
	secs := strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	s := fmt.Sprintf("P%dDT%dH%dM%sS", days, hours, minutes, secs)
	return &s
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func orDefaultInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

func strPtr(s string) *string { return &s }
func boolPtr(b bool) *bool    { return &b }
func int32Ptr(n int) *int32   { v := int32(n); return &v }
func statusCode(err error) int {
	var respErr *azcore.ResponseError
	if errors.As(err, &respErr) {
		return respErr.StatusCode
	}
	return 0
}

// mapErr wraps err with what was being done and the bus error it stands for.
func mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sbbus: %s: %w", what, err)
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		switch sbErr.Code {
		case azservicebus.CodeLockLost:
			return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrLockLost, err)
		case azservicebus.CodeNotFound:
			return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrNotFound, err)
		case azservicebus.CodeClosed:
			return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrClosed, err)
		}
	}
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		switch amqpErr.Condition {
		case "com.microsoft:message-lock-lost":
			return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrLockLost, err)
		case amqp.ErrCondNotFound, "com.microsoft:entity-not-found":
			return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrNotFound, err)
		}
	}
	if statusCode(err) == http.StatusNotFound {
		return fmt.Errorf("sbbus: %s: %w: %w", what, bus.ErrNotFound, err)
	}
	return fmt.Errorf("sbbus: %s: %w", what, err)
}
