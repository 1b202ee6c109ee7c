// Package freeport finds free TCP ports on 127.0.0.1 for processes and
// servers that tests and launchers start, below the kernel's ephemeral
// range: between a port's release and the server's own bind, a port from
// that range can be handed to any outgoing connection on the machine (a
// test's database client), and the server then fails with "address already
// in use"; a port below the range is only ever taken by an explicit bind.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Listen binds a free port below the ephemeral range (any free port when
// none is found there). Close it just before the server binds the address.
func Listen() (net.Listener, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11024 {
				low = v
			}
		}
	}
	for range 100 {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", low-10000+rand.IntN(10000))); err == nil { //nolint:gosec // G404: a port to try, not a secret
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// Addr returns a free host:port, released for the caller to bind.
func Addr() (string, error) {
	l, err := Listen()
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Port returns a free port number, released for the caller to bind.
func Port() (int, error) {
	l, err := Listen()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Retry runs start on n ports from pick until it succeeds, fails for a
// reason other than a lost port (lost tells), or has tried three times: a
// port is free when picked but not held until a server in another process
// binds it, and another process can take it meanwhile.
func Retry(n int, pick func() (int, error), start func(ports []int) error, lost func(error) bool) error {
	var err error
	for range 3 {
		ports := make([]int, n)
		for i := range ports {
			if ports[i], err = pick(); err != nil {
				return err
			}
		}
		if err = start(ports); err == nil || !lost(err) {
			return err
		}
	}
	return err
}
