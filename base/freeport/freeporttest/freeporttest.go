// Package freeporttest stands in for freeport's picks in tests of code that
// must survive losing a picked port to another process before binding it.
package freeporttest

import (
	"net"
	"sync"
	"testing"

	"github.com/lucius-platform/lucius/base/freeport"
	"github.com/lucius-platform/lucius/base/server"
)

// Picker hands out free ports, except that its n-th pick is a port the test
// holds bound (Taken) until the test ends.
type Picker struct {
	Taken int

	mu    sync.Mutex
	at    int
	picks int
}

// TakenAt returns a picker whose n-th pick (from 1) is taken.
func TakenAt(t testing.TB, n int) *Picker {
	t.Helper()
	return &Picker{Taken: held(t).Addr().(*net.TCPAddr).Port, at: n}
}

// Pick is the stand-in for freeport.Port.
func (p *Picker) Pick() (int, error) {
	p.mu.Lock()
	p.picks++
	taken := p.picks == p.at
	p.mu.Unlock()
	if taken {
		return p.Taken, nil
	}
	return freeport.Port()
}

// Picks counts the picks so far.
func (p *Picker) Picks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.picks
}

// Adopted returns an address on 127.0.0.1 the test holds bound for a
// service it starts in its own process: the service's server.Listen serves
// the held socket (server.Adopt), so no other process can take the port
// between this call and the service's start.
func Adopted(t testing.TB) string {
	t.Helper()
	l := held(t)
	server.Adopt(l)
	return l.Addr().String()
}

// held binds a port on 127.0.0.1 until the test ends.
func held(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
