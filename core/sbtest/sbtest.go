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
// tools/sbbroker/package-lock.json into .build/sbbroker when they are missing,
// picks free ports, waits until the broker listens and stops it on cleanup.
// Without node or npm the test fails, naming what to install: a skipped
// transport test would pass without testing anything.
//
//	b := sbtest.Start(t)
//	cfg := sbbus.Config{ConnectionString: b.ConnectionString, AdminEndpoint: b.AdminURL}
package sbtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/freeport"
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

	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	out   *syncBuffer
}

// Start starts a broker for t and stops it when t's cleanup runs.
func Start(t testing.TB) *Broker {
	t.Helper()
	b, err := StartBroker(context.Background())
	if errors.Is(err, errNoNode) {
		t.Fatalf("sbtest: %v (install Node.js and npm, e.g. apt-get install nodejs npm; make test then installs the broker's packages)", err)
	}
	if err != nil {
		t.Fatalf("sbtest: %v", err)
	}
	t.Cleanup(func() { b.Stop() })
	return b
}

var errNoNode = errors.New("node and npm are needed for the Service Bus test broker")

// StartBroker starts a broker outside a test (e.g. in TestMain); Stop it.
func StartBroker(ctx context.Context) (*Broker, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errNoNode
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	modules, err := installDeps(ctx, root)
	if err != nil {
		return nil, err
	}
	amqpPort, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	httpPort, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(node, filepath.Join(root, "tools", "sbbroker", "broker.js"),
		"--host", "127.0.0.1", "--amqp-port", fmt.Sprint(amqpPort), "--http-port", fmt.Sprint(httpPort))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	out := &syncBuffer{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	b := &Broker{
		AMQPAddr:         fmt.Sprintf("127.0.0.1:%d", amqpPort),
		AdminURL:         fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		ConnectionString: fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=test;SharedAccessKey=dGVzdA==;UseDevelopmentEmulator=true", amqpPort),
		cmd:              cmd,
		stdin:            stdin,
		done:             make(chan struct{}),
		out:              out,
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "sbbroker listening") {
				close(ready)
			}
			out.Write(append(sc.Bytes(), '\n')) //nolint:errcheck
		}
	}()
	go func() { cmd.Wait(); close(b.done) }() //nolint:errcheck
	select {
	case <-ready:
		return b, nil
	case <-b.done:
		return nil, fmt.Errorf("broker exited before listening: %s", out.String())
	case <-time.After(30 * time.Second):
		b.Stop()
		return nil, fmt.Errorf("broker did not listen within 30s: %s", out.String())
	case <-ctx.Done():
		b.Stop()
		return nil, ctx.Err()
	}
}

// Stop ends the broker and waits for it.
func (b *Broker) Stop() {
	b.stdin.Close() // the broker exits when stdin closes
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill() //nolint:errcheck
		<-b.done
	}
}

// Output is what the broker printed so far (debug with SBBROKER_DEBUG=1).
func (b *Broker) Output() string { return b.out.String() }

// repoRoot is the directory holding go.work, found upwards from the working
// directory (tests run in their package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "tools", "sbbroker", "broker.js")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("tools/sbbroker/broker.js not found above the working directory")
		}
		dir = parent
	}
}

var installMu sync.Mutex

// installDeps runs `npm ci` from tools/sbbroker's package files into
// .build/sbbroker unless the same lock file was installed there already, and
// returns the node_modules directory.
func installDeps(ctx context.Context, root string) (string, error) {
	installMu.Lock()
	defer installMu.Unlock()
	src := filepath.Join(root, "tools", "sbbroker")
	dst := filepath.Join(root, ".build", "sbbroker")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", err
	}
	modules := filepath.Join(dst, "node_modules")
	if installedAlready(dst, lock) {
		return modules, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", errNoNode
	}
	// Install into a fresh directory and rename it, so test binaries that
	// start at once never see a half-installed tree.
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "sbbroker-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %w: %s", tmp, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "installed-lock.json"), lock, 0o644); err != nil {
		return "", err
	}
	if installedAlready(dst, lock) {
		return modules, nil // another test binary finished first
	}
	os.RemoveAll(dst) // stale: another lock file, or a broken install
	if err := os.Rename(tmp, dst); err != nil {
		if installedAlready(dst, lock) {
			return modules, nil // another test binary won the race
		}
		return "", err
	}
	return modules, nil
}

// installedAlready tells whether dir holds an install of this lock file; the
// stamp is written last, so a valid install is never moved or removed.
func installedAlready(dir string, lock []byte) bool {
	installed, err := os.ReadFile(filepath.Join(dir, "installed-lock.json"))
	return err == nil && bytes.Equal(installed, lock)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
