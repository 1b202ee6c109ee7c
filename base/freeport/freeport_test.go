package freeport_test

import (
	"errors"
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

func TestRetryStartsAgainOnNewPortsOnlyWhenAPortWasLost(t *testing.T) {
	t.Parallel()
	errLost, errOther := errors.New("lost"), errors.New("other")
	for _, tc := range []struct {
		name    string
		results []error // what each start returns, in order
		want    error
		starts  int
	}{
		{"first start succeeds", []error{nil}, nil, 1},
		{"a lost port, then success", []error{errLost, nil}, nil, 2},
		{"another failure ends it", []error{errOther, nil}, errOther, 1},
		{"three lost ports give up", []error{errLost, errLost, errLost, nil}, errLost, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, starts := 100, 0
			pick := func() (int, error) { next++; return next, nil }
			var seen [][]int
			err := freeport.Retry(2, pick, func(ports []int) error {
				seen = append(seen, ports)
				starts++
				return tc.results[starts-1]
			}, func(err error) bool { return err == errLost })
			if err != tc.want || starts != tc.starts {
				t.Fatalf("Retry = %v after %d starts; want %v after %d", err, starts, tc.want, tc.starts)
			}
			for i, ports := range seen {
				if want := []int{101 + 2*i, 102 + 2*i}; ports[0] != want[0] || ports[1] != want[1] {
					t.Fatalf("start %d on %v, want new ports %v", i+1, ports, want)
				}
			}
		})
	}
}
