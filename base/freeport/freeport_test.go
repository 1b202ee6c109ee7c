package freeport_test

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/freeport"
)

// Ports come from below the kernel's ephemeral range and are bindable.
func TestPortsAreBelowTheEphemeralRangeAndFree(t *testing.T) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			low, _ = strconv.Atoi(f[0])
		}
	}
	for range 20 {
		p, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		if low > 11024 && p >= low {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
