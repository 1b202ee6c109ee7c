package stack

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/server"
)

// serveEnv makes the test binary, started as a process of the stack, serve
// one connection on the address it names through server.Listen, as every
// Lucius binary does.
const serveEnv = "LUCIUS_TEST_STACK_SERVE"

func TestServeChild(t *testing.T) {
	addr := os.Getenv(serveEnv)
	if addr == "" {
		t.Skip("run as a process by TestProcessIsHandedTheSocketsItServes")
	}
	l, err := server.Listen(addr)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	c, err := l.Accept()
	if err != nil {
		os.Exit(1)
	}
	fmt.Fprintf(c, "pid %d\n", os.Getpid())
	c.Close()
}

// The first run serves on the port reserved since the plan, without the
// stack releasing it first, and a restart serves on the same address again.
func TestProcessIsHandedTheSocketsItServes(t *testing.T) {
	reserved, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := reserved.Addr().String()
	// The test keeps a copy of the reserved socket through the first run, so
	// that run can serve only on the socket it is handed: binding the
	// address itself would fail.
	held, err := reserved.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Name: "child", binary: os.Args[0], args: []string{"-test.run=^TestServeChild$"}, out: io.Discard,
		env:      []string{serveEnv + "=" + addr},
		serves:   []string{addr},
		reserved: map[string]net.Listener{addr: reserved}}
	for run := 1; run <= 2; run++ {
		if err := p.start(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		got := readLine(t, addr)
		if want := fmt.Sprintf("pid %d", p.Pid()); got != want {
			t.Fatalf("run %d: %s answered %q, want %q", run, addr, got, want)
		}
		select {
		case <-p.Exited():
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d did not exit", run)
		}
		if len(p.reserved) != 0 {
			t.Fatalf("run %d left reserved ports: %v", run, p.reserved)
		}
		held.Close() // a restart binds the address again
	}
}

func readLine(t *testing.T, addr string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				t.Fatalf("read %s: %v", addr, err)
			}
			return strings.TrimSpace(line)
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
