// Package sbtest starts Lucius's Service-Bus-compatible test broker
// (tools/sbbroker, a Node script on the npm package rhea) for tests of the
// Azure Service Bus adapter, the way pgtest starts PostgreSQL.
//
// The broker speaks AMQP 1.0 as Service Bus does to the real azservicebus
// client (SASL ANONYMOUS or PLAIN, the $cbs put-token node accepting any
// token, peek-lock, $management renew-lock, schedule, cancel-scheduled and
// peek) and serves the subset of the ATOM management REST API that
// admin.Client uses to create and update queues, topics, subscriptions and
// rules and to read their runtime properties (message counts), so the adapter
// provisions entities and reads queue depths on it exactly as on Azure.
//
// Start installs the broker's pinned npm dependencies with `npm ci` from
// tools/sbbroker/package-lock.json into .build/sbbroker when they are missing
// (package nodeproc), picks free ports, waits until the broker listens and
// stops it on cleanup. Without node or npm the test fails, naming what to
// install: a skipped transport test would pass without testing anything.
//
//	b := sbtest.Start(t)
//	cfg := sbbus.Config{ConnectionString: b.ConnectionString, AdminEndpoint: b.AdminURL}
package sbtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lucius-platform/lucius/base/nodeproc"
)

// Broker is a running test broker.
type Broker struct {
	// ConnectionString is a Service Bus connection string for the broker's
	// AMQP port (UseDevelopmentEmulator=true: plain AMQP, custom port kept).
	ConnectionString string
	// AdminURL is the base URL of the broker's management REST API.
	AdminURL string
	// AMQPAddr is host:port of the AMQP listener.
	AMQPAddr string

	proc *nodeproc.Process
}

// Start starts a broker for t and stops it when t's cleanup runs.
func Start(t testing.TB) *Broker {
	t.Helper()
	b, err := StartBroker(context.Background())
	if errors.Is(err, nodeproc.ErrNoNode) {
		t.Fatalf("sbtest: %v (install Node.js and npm, e.g. apt-get install nodejs npm; make test then installs the broker's packages)", err)
	}
	if err != nil {
		t.Fatalf("sbtest: %v", err)
	}
	t.Cleanup(func() { b.Stop() })
	return b
}

// StartBroker starts a broker outside a test (e.g. in TestMain); Stop it.
func StartBroker(ctx context.Context) (*Broker, error) {
	proc, ports, err := nodeproc.StartOnFreePorts(ctx, 2, func(ports []int) nodeproc.Spec {
		return nodeproc.Spec{
			Tool:   "sbbroker",
			Script: func(root, _ string) string { return filepath.Join(root, "tools", "sbbroker", "broker.js") },
			Args:   []string{"--host", "127.0.0.1", "--amqp-port", fmt.Sprint(ports[0]), "--http-port", fmt.Sprint(ports[1])},
			Ready:  "sbbroker listening",
		}
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	amqpPort, httpPort := ports[0], ports[1]
	return &Broker{
		AMQPAddr:         fmt.Sprintf("127.0.0.1:%d", amqpPort),
		AdminURL:         fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		ConnectionString: fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=test;SharedAccessKey=dGVzdA==;UseDevelopmentEmulator=true", amqpPort),
		proc:             proc,
	}, nil
}

// Stop ends the broker (it exits when its stdin closes) and waits for it.
func (b *Broker) Stop() { b.proc.Stop() }

// Output is what the broker printed so far (debug with SBBROKER_DEBUG=1).
func (b *Broker) Output() string { return b.proc.Output() }
