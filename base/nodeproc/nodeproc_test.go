package nodeproc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/nodeproc"
)

// script writes a node script for a test and returns a Spec running it
// with the Service Bus broker's installed packages.
func script(t *testing.T, body string) nodeproc.Spec {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.js")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return nodeproc.Spec{Tool: "sbbroker", Script: func(string, string) string { return p }, Ready: "ready on", Timeout: 20 * time.Second}
}

func TestStartWaitsForTheReadyLineAndStopEndsTheServer(t *testing.T) {
	t.Parallel()
	spec := script(t, `console.log("starting"); console.log("ready on 1234"); setInterval(() => {}, 1000);`)
	p, err := nodeproc.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Output(), "ready on 1234") {
		t.Errorf("output %q", p.Output())
	}
	p.Stop() // returns once the process has exited
}

func TestStartReportsAServerThatExitsBeforeListening(t *testing.T) {
	t.Parallel()
	spec := script(t, `console.error("no port for you"); process.exit(3);`)
	if _, err := nodeproc.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "exited before listening") ||
		!strings.Contains(err.Error(), "no port for you") {
		t.Fatalf("Start = %v", err)
	}
}

// Output keeps what a server printed on stdout just before exiting.
func TestStartReportsTheLastLinesOfAServerThatExits(t *testing.T) {
	t.Parallel()
	spec := script(t, `console.log("Exit due to unhandled error: listen EADDRINUSE"); process.exit(1);`)
	if _, err := nodeproc.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "EADDRINUSE") {
		t.Fatalf("Start = %v", err)
	}
}
