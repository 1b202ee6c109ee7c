package nodeproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/freeport"
	"github.com/lucius-platform/lucius/base/freeport/freeporttest"
)

// A port another process takes between its pick and the server's bind costs
// a start on new ports, not the start.
func TestStartOnFreePortsTriesNewPortsWhenOneIsTaken(t *testing.T) {
	picker := freeporttest.TakenAt(t, 2) // the first start's second port
	pickPort = picker.Pick
	defer func() { pickPort = freeport.Port }()

	server := filepath.Join(t.TempDir(), "server.js")
	if err := os.WriteFile(server, []byte(`
const net = require('net');
const ports = process.argv.slice(2).map(Number);
let listening = 0;
for (const port of ports) {
  const s = net.createServer((c) => c.end('port ' + port + '\n'));
  s.on('error', (e) => { console.error(e.message); process.exit(1); });
  s.listen(port, '127.0.0.1', () => { if (++listening === ports.length) console.log('ready on ' + ports.join(',')); });
}
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, ports, err := StartOnFreePorts(context.Background(), 2, func(ports []int) Spec {
		return Spec{Tool: "sbbroker", Script: func(string, string) string { return server },
			Args: []string{fmt.Sprint(ports[0]), fmt.Sprint(ports[1])}, Ready: "ready on", Timeout: 20 * time.Second}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if picker.Picks() != 4 || ports[0] == picker.Taken || ports[1] == picker.Taken {
		t.Fatalf("picked %d ports, serving on %v (taken: %d); want a second start on two new ports", picker.Picks(), ports, picker.Taken)
	}
	for _, port := range ports {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(buf)
		c.Close()
		if got, want := string(buf[:n]), fmt.Sprintf("port %d\n", port); got != want {
			t.Fatalf("port %d answered %q, want %q", port, got, want)
		}
	}
}
