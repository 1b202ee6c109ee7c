package busconfig

import (
	"errors"
	"testing"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/sbtest"
)

// LUCIUS_BUS=servicebus opens package sbbus; without provisioning it checks
// entities over AMQP, so a missing queue is bus.ErrNotFound.
func TestServiceBusOpensTheAdapter(t *testing.T) {
	t.Parallel()
	broker := sbtest.Start(t)
	cfg, err := ConfigFromEnv(env.FromMap(map[string]string{
		"LUCIUS_BUS":                          "servicebus",
		"LUCIUS_SERVICEBUS_CONNECTION_STRING": broker.ConnectionString,
		"LUCIUS_SERVICEBUS_PROVISION":         "false",
	}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), cfg, nil, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer b.Close(t.Context()) //nolint:errcheck
	if b.TxPublisher() != nil {
		t.Error("Service Bus offers in-transaction publishing")
	}
	if err := b.EnsureQueue(t.Context(), "missing", bus.QueueOptions{}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("ensure a missing queue without provisioning: %v, want bus.ErrNotFound", err)
	}
}
