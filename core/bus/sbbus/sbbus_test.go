package sbbus_test

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/bus/bustest"
	"github.com/lucius-platform/lucius/core/bus/sbbus"
	"github.com/lucius-platform/lucius/core/sbtest"
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
	bustest.Run(t, func(t *testing.T) bus.Bus { return newBus(t, broker, sbbus.Config{}) })
	if t.Failed() && os.Getenv("SBBROKER_DEBUG") != "" {
		t.Log(broker.Output())
	}
}
