package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Config configures a Runner. Zero values take the defaults noted.
type Config struct {
	// Service is the platform service the directives are addressed to, e.g.
	// "ocr": the name of its directive subscriptions and their filter. Required.
	Service string
	// WorkerID names this instance in callbacks and idempotency records
	// (at most 128 bytes). Default: <hostname>-<pid>.
	WorkerID string
	// Topology of the directive topics. Default routing.TopologyTwoTopicSets.
	Topology routing.Topology
	// Concurrency is how many directives execute at once. Default 4.
	Concurrency int
	// Prefetch is how many messages each subscription's receiver takes at
	// once (default 1, at most MaxPrefetch): those beyond a free execution
	// slot wait for one, their locks renewed while they wait. On Service Bus
	// it is the link credit of each receive. More saves a round trip per
	// message under load; each waiting message is one another worker cannot
	// take meanwhile.
	Prefetch int
	// NoOp skips the executor: every attempt succeeds at once with output
	// {"noop": true} and no artifacts. ACK, RESULT and the idempotency record
	// work as usual. For benchmarks of the control plane.
	NoOp bool
	// ExecutionDelay is added before every execution (no-op mode included),
	// honouring cancellation: a testing and chaos hook that keeps attempts in
	// flight long enough to kill a process under them. Default 0.
	ExecutionDelay time.Duration
	// Middleware wraps the executor (or the no-op), outermost first.
	Middleware []Middleware
	// LockDuration and MaxDeliveryCount configure the directive subscriptions
	// the runner declares at start. Defaults: bus.DefaultLockDuration (60s)
	// and bus.DefaultMaxDeliveryCount (10).
	LockDuration     time.Duration
	MaxDeliveryCount int
	// LockRenewInterval is how often the lock of a message in hand is renewed
	// (never less often than half its remaining lock time). Default 20s.
	LockRenewInterval time.Duration
	// TaskTimeout bounds one execution; past it the attempt fails RETRYABLE
	// with code TIMEOUT. Default 10 minutes.
	TaskTimeout time.Duration
	// CallTimeout bounds one ACK, RESULT or Heartbeat call. Default 10s.
	CallTimeout time.Duration
	// AckLinger, when set, holds the ACK back that long while the attempt
	// executes: an attempt done within it sends its RESULT alone (a RESULT
	// implies the ACK), saving a callback and an orchestrator commit per
	// step; a longer one sends the ACK then, and an answer that stops the
	// attempt (another attempt owns the step, the job ended) cancels its
	// execution. The attempt then runs before its ACK confirmed it owns the
	// step, so a handler must tolerate running for an attempt that turns out
	// stale (as a lease lost mid-execution already asks). 0 (the default)
	// ACKs before executing. At most MaxAckLinger.
	AckLinger time.Duration
	// AckRetryTimeout is how long an unanswered ACK is retried before the
	// attempt executes anyway (a RESULT implies the ACK, and the RESULT's
	// answer still gates it). Default 30s.
	AckRetryTimeout time.Duration
	// Backoff spaces out retried callbacks and receive errors. RESULT is
	// retried without limit while the worker runs.
	Backoff Backoff
	// ShutdownGrace is how long in-flight directives may finish, or save a
	// checkpoint and return ErrShuttingDown, after Run's context ends (when
	// Task.ShuttingDown is closed); then they are interrupted, their claims
	// released and their messages abandoned for redelivery. Default 30s.
	ShutdownGrace time.Duration
	// MaxInputBytes limits Task.ReadInput and Task.ReadRef. Default 64 MiB.
	MaxInputBytes int64
	// FileRoots are the absolute folders file refs may name besides each
	// job's own workspace (LUCIUS_FILE_ROOTS): job inputs and output_ref
	// outside them, or reached through ".." or a symbolic link leading out,
	// fail the attempt with CodeRefOutsideFileRoots. Default: none, so only
	// the job's workspace is readable and writable.
	FileRoots []string
	// Egress decides which addresses https:// refs and Azure Storage
	// endpoints may reach (LUCIUS_EGRESS_ALLOW opens internal ranges). The
	// zero policy refuses loopback, private, link-local and metadata
	// addresses.
	Egress egress.Policy
	// Azure configures az://account/container/path refs (endpoints,
	// credential, block size; see blob.AzureConfig). The zero value uses
	// DefaultAzureCredential against https://<account>.blob.core.windows.net.
	Azure blob.AzureConfig
	// InlineOutputLimit is the largest output (protojson bytes) a RESULT
	// carries inline; a larger one is written to the step's directory and
	// the RESULT carries its ref instead (see SpilledOutputKey). Keep it at
	// or under the orchestrator's limit. Default DefaultInlineOutputLimit.
	InlineOutputLimit int
	// Logger receives the runner's logs; it should already name the service
	// (telemetry.Setup adds service and instance). Default slog.Default().
	Logger *slog.Logger
	// TracerProvider, MeterProvider and Propagator default to the
	// OpenTelemetry globals (telemetry.Setup installs them).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// DialOptions are added to the callback clients' options (after
	// base/server.Dial's insecure transport and tracing, and the round_robin
	// service config), e.g. transport credentials.
	DialOptions []grpc.DialOption
}

// Defaults for Config.
const (
	DefaultConcurrency       = 4
	DefaultPrefetch          = 1
	MaxPrefetch              = 256
	DefaultLockRenewInterval = 20 * time.Second
	DefaultTaskTimeout       = 10 * time.Minute
	DefaultCallTimeout       = 10 * time.Second
	DefaultAckRetryTimeout   = 30 * time.Second
	// MaxAckLinger bounds Config.AckLinger: well under the ACK timeout and
	// the first heartbeat.
	MaxAckLinger         = 500 * time.Millisecond
	DefaultShutdownGrace = 30 * time.Second
)

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if err := checkServiceName(c.Service); err != nil {
		errs = append(errs, err)
	}
	if len(c.WorkerID) > 128 {
		errs = append(errs, fmt.Errorf("worker id is %d bytes; the contract allows 128", len(c.WorkerID)))
	}
	if c.Topology != "" {
		if _, err := routing.ParseTopology(string(c.Topology)); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d is negative", c.Concurrency))
	}
	if c.Prefetch < 0 || c.Prefetch > MaxPrefetch {
		errs = append(errs, fmt.Errorf("prefetch %d: want 1-%d (0: the default, %d)", c.Prefetch, MaxPrefetch, DefaultPrefetch))
	}
	if c.MaxDeliveryCount < 0 {
		errs = append(errs, fmt.Errorf("max delivery count %d is negative", c.MaxDeliveryCount))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"execution delay", c.ExecutionDelay},
		{"lock duration", c.LockDuration}, {"lock renew interval", c.LockRenewInterval},
		{"task timeout", c.TaskTimeout}, {"call timeout", c.CallTimeout},
		{"ack retry timeout", c.AckRetryTimeout}, {"shutdown grace", c.ShutdownGrace}, {"ack linger", c.AckLinger},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
	}
	if c.AckLinger > MaxAckLinger {
		errs = append(errs, fmt.Errorf("ack linger %v: want at most %v", c.AckLinger, MaxAckLinger))
	}
	if c.LockDuration > 0 && c.LockDuration < time.Second {
		errs = append(errs, fmt.Errorf("lock duration %v is under a second", c.LockDuration))
	}
	for _, r := range c.FileRoots {
		if !filepath.IsAbs(r) {
			errs = append(errs, fmt.Errorf("file root %q is not an absolute path", clip(r)))
		} else if filepath.Clean(r) == "/" {
			errs = append(errs, errors.New(`file root "/" would allow every file`))
		}
	}
	if err := c.Azure.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.InlineOutputLimit < 0 {
		errs = append(errs, fmt.Errorf("inline output limit %d is negative", c.InlineOutputLimit))
	}
	if c.MaxInputBytes < 0 {
		errs = append(errs, fmt.Errorf("max input bytes %d is negative", c.MaxInputBytes))
	}
	if err := c.Backoff.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}

// checkServiceName accepts names usable as bus subscription names, with room
// for the "-burst" suffix of the one-topic-set topology.
func checkServiceName(s string) error {
	if s == "" {
		return errors.New("service is required")
	}
	if len(s) > 40 {
		return fmt.Errorf("service %q is longer than 40 characters", clip(s))
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_' || c == '.'))
		if !ok {
			return fmt.Errorf("service %q: want lowercase letters, digits, '-', '_' or '.', starting with a letter or digit", clip(s))
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		c.WorkerID = blob.TruncateUTF8(host, 100) + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Topology == "" {
		c.Topology = routing.TopologyTwoTopicSets
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.LockDuration == 0 {
		c.LockDuration = bus.DefaultLockDuration
	}
	if c.MaxDeliveryCount == 0 {
		c.MaxDeliveryCount = bus.DefaultMaxDeliveryCount
	}
	if c.LockRenewInterval == 0 {
		c.LockRenewInterval = DefaultLockRenewInterval
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = DefaultTaskTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.AckRetryTimeout == 0 {
		c.AckRetryTimeout = DefaultAckRetryTimeout
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.MaxInputBytes == 0 {
		c.MaxInputBytes = DefaultMaxInputBytes
	}
	if c.InlineOutputLimit == 0 {
		c.InlineOutputLimit = DefaultInlineOutputLimit
	}
	c.Backoff = c.Backoff.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = otel.GetTextMapPropagator()
	}
	return c
}
