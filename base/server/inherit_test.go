package server

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// childAddrEnv tells the test binary, started again as a child, to act as a
// service: Listen on the address, print "served" to the first connection,
// or print the error.
const childAddrEnv = "LUCIUS_TEST_INHERIT_ADDR"

func TestInheritedListenerChild(t *testing.T) {
	addr := os.Getenv(childAddrEnv)
	if addr == "" {
		t.Skip("run as a child by TestListenServesAnInheritedListener")
	}
	l, err := Listen(addr)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Fprintln(c, "served")
	c.Close()
}

func TestListenServesAnInheritedListener(t *testing.T) {
	regular, err := os.Create(filepath.Join(t.TempDir(), "not-a-socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	for _, tc := range []struct {
		name string
		// handDown passes the parent's listener as fd 3; count is the
		// LUCIUS_LISTEN_FDS value ("" leaves it unset).
		handDown bool
		// viaHandDown passes it with HandDown, which sets the count.
		viaHandDown bool
		extra       *os.File
		count       string
		// otherAddr makes the child listen on a free address instead of
		// the parent's.
		otherAddr bool
		want      string
	}{
		{name: "handed down with HandDown", viaHandDown: true, want: "served"},
		{name: "handed down and counted", handDown: true, count: "1", want: "served"},
		{name: "handed down, another address asked for", handDown: true, count: "1", otherAddr: true, want: "served"},
		{name: "not handed down: the port is taken", count: "", want: "address already in use"},
		{name: "handed down but not counted", handDown: true, count: "", want: "address already in use"},
		{name: "count is not a number", handDown: true, count: "one", want: `LUCIUS_LISTEN_FDS="one": want the number`},
		{name: "count is negative", count: "-1", want: `LUCIUS_LISTEN_FDS="-1"`},
		{name: "descriptor is not a socket", extra: regular, count: "1", want: "file descriptor 3 is not a listening socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The parent keeps the port bound throughout: the child can only
			// serve on it through the descriptor it was handed.
			parent, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer parent.Close()
			addr := parent.Addr().String()
			if tc.otherAddr {
				free, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr = free.Addr().String()
				free.Close()
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestInheritedListenerChild$", "-test.v")
			cmd.Env = append(os.Environ(), childAddrEnv+"="+addr)
			if tc.count != "" {
				cmd.Env = append(cmd.Env, ListenFDsEnv+"="+tc.count)
			}
			if tc.handDown {
				f, err := parent.(*net.TCPListener).File()
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.ExtraFiles = []*os.File{f}
			}
			if tc.viaHandDown {
				release, err := HandDown(cmd, []net.Listener{parent})
				if err != nil {
					t.Fatal(err)
				}
				defer release()
			}
			if tc.extra != nil {
				cmd.ExtraFiles = []*os.File{tc.extra}
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait() //nolint:errcheck // the child's output is what the test checks
			lines := bufio.NewScanner(out)
			got := ""
			for lines.Scan() {
				line := lines.Text()
				if line == "listening" {
					got = dialAndRead(t, addr)
					break
				}
				if strings.HasPrefix(line, "error:") {
					got = line
					break
				}
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("child: got %q, want %q", got, tc.want)
			}
		})
	}
}

func dialAndRead(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

// An adopted listener is served once, in place of binding its address.
func TestListenServesAnAdoptedListenerOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	Adopt(l)
	got, err := Listen(l.Addr().String())
	if err != nil || got != l {
		t.Fatalf("Listen(%s) = %v, %v; want the adopted listener", l.Addr(), got, err)
	}
	if again, err := Listen(l.Addr().String()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		if again != nil {
			again.Close()
		}
		t.Fatalf("a second Listen(%s) = %v; want the address in use (the adopted listener still holds it)", l.Addr(), err)
	}
}
