package sbbus_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/sbtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustest"
	"github.com/lucius-platform/lucius/bus/sbbus"
)

var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func newBus(t testing.TB, broker *sbtest.Broker, cfg sbbus.Config) *sbbus.Bus {
	t.Helper()
	cfg.ConnectionString = broker.ConnectionString
	cfg.AdminEndpoint = broker.AdminURL
	cfg.Logger = logger
	b, err := sbbus.New(cfg)
	if err != nil {
		t.Fatalf("new bus: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("close bus: %v", err)
		}
	})
	return b
}

// TestConformance runs the suite with a Bus (its own AMQP connection) per case
// on one test broker, as services share one namespace.
func TestConformance(t *testing.T) {
	broker := sbtest.Start(t)
	t.Cleanup(func() { // after the parallel cases
		if t.Failed() && os.Getenv("SBBROKER_DEBUG") != "" {
			t.Log(broker.Output())
		}
	})
	bustest.Run(t, func(t *testing.T) bus.Bus { return newBus(t, broker, sbbus.Config{}) })
}

// With provisioning off, Ensure* only check that entities exist.
func TestSkipProvisioningChecksExistence(t *testing.T) {
	broker := sbtest.Start(t)
	ctx := t.Context()
	prov := newBus(t, broker, sbbus.Config{})
	check := newBus(t, broker, sbbus.Config{SkipProvisioning: true})
	if err := check.EnsureQueue(ctx, "absent", bus.QueueOptions{}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("ensure a missing queue without provisioning: %v, want bus.ErrNotFound", err)
	}
	if err := check.EnsureTopic(ctx, "absent-topic", bus.TopicOptions{}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("ensure a missing topic without provisioning: %v, want bus.ErrNotFound", err)
	}
	if err := prov.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := prov.EnsureTopic(ctx, "t", bus.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := prov.EnsureSubscription(ctx, "t", "s", bus.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := check.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatalf("ensure an existing queue without provisioning: %v", err)
	}
	if err := check.EnsureTopic(ctx, "t", bus.TopicOptions{}); err != nil {
		t.Fatalf("ensure an existing topic without provisioning: %v", err)
	}
	if err := check.EnsureSubscription(ctx, "t", "s", bus.SubscriptionOptions{}); err != nil {
		t.Fatalf("ensure an existing subscription without provisioning: %v", err)
	}
	if err := check.EnsureSubscription(ctx, "t", "absent", bus.SubscriptionOptions{}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("ensure a missing subscription without provisioning: %v, want bus.ErrNotFound", err)
	}
}

// KeepLock renews a lock past its duration until stopped.
func TestKeepLockHoldsTheMessage(t *testing.T) {
	broker := sbtest.Start(t)
	ctx := t.Context()
	b := newBus(t, broker, sbbus.Config{})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{LockDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	s, _ := b.NewSender(ctx, "q")
	if err := s.Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	holder, _ := b.NewReceiver(ctx, bus.QueueSource("q"))
	rival, _ := b.NewReceiver(ctx, bus.QueueSource("q"))
	msgs, err := holder.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := sbbus.KeepLock(ctx, holder, msgs[0], 0)
	wait, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if got, err := rival.Receive(wait, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rival received %d messages (%v) while the lock was kept", len(got), err)
	}
	stop()
	if err := holder.Complete(ctx, msgs[0]); err != nil {
		t.Fatalf("complete after keeping the lock: %v", err)
	}
}
