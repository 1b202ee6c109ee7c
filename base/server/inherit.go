package server

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
)

// ListenFDsEnv names how many listening sockets a launcher handed down: a
// process started with LUCIUS_LISTEN_FDS=n has them open as file descriptors
// 3 … 3+n-1 (the layout of systemd socket activation), and Listen serves on
// the one bound to the address it is asked for instead of binding it again.
// A launcher that keeps a port bound from the moment it picks it until the
// process serves on it leaves no moment in which another process can take
// the port (tools/stack starts the test suites this way).
const ListenFDsEnv = "LUCIUS_LISTEN_FDS"

// firstInheritedFD is where inherited descriptors start, after stdin, stdout
// and stderr (exec.Cmd.ExtraFiles puts them there).
const firstInheritedFD = 3

var inherited struct {
	once   sync.Once
	err    error
	mu     sync.Mutex
	byAddr map[string]net.Listener
}

// Adopt makes Listen serve l when asked for l's address, instead of binding
// it: the in-process form of handing a socket down, for a test that starts a
// service in its own process on a port it already holds.
func Adopt(l net.Listener) {
	loadInheritedOnce()
	inherited.mu.Lock()
	defer inherited.mu.Unlock()
	if inherited.byAddr == nil {
		inherited.byAddr = map[string]net.Listener{}
	}
	inherited.byAddr[l.Addr().String()] = l
}

func loadInheritedOnce() {
	inherited.once.Do(func() { inherited.byAddr, inherited.err = loadInherited(os.Getenv(ListenFDsEnv)) })
}

// inheritedListener takes the inherited (or adopted) listener bound to addr,
// if any: each is served once.
func inheritedListener(addr string) (net.Listener, error) {
	loadInheritedOnce()
	if inherited.err != nil {
		return nil, inherited.err
	}
	inherited.mu.Lock()
	defer inherited.mu.Unlock()
	l, ok := inherited.byAddr[addr]
	if ok {
		delete(inherited.byAddr, addr)
	}
	return l, nil
}

// loadInherited wraps the n descriptors LUCIUS_LISTEN_FDS counts, by the
// address each is bound to. A count that is not one, or a descriptor that is
// not a listening TCP socket, is the launcher's mistake and fails the start.
func loadInherited(count string) (map[string]net.Listener, error) {
	if count == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 || n > 1024 {
		return nil, fmt.Errorf("%s=%q: want the number of listening sockets handed down (0 to 1024)", ListenFDsEnv, count)
	}
	byAddr := make(map[string]net.Listener, n)
	for fd := firstInheritedFD; fd < firstInheritedFD+n; fd++ {
		f := os.NewFile(uintptr(fd), "inherited-listener-"+strconv.Itoa(fd))
		l, err := net.FileListener(f)
		_ = f.Close() // FileListener holds its own duplicate
		if err != nil {
			return nil, fmt.Errorf("%s=%d: file descriptor %d is not a listening socket: %w", ListenFDsEnv, n, fd, err)
		}
		byAddr[l.Addr().String()] = l
	}
	return byAddr, nil
}

// HandDown passes listeners to cmd, a Lucius process not yet started, which
// serves on them instead of binding their addresses (ListenFDsEnv). Call
// release once cmd has started (or failed to); the caller's listeners stay
// open until it closes them.
func HandDown(cmd *exec.Cmd, listeners []net.Listener) (release func(), err error) {
	var files []*os.File
	release = func() {
		for _, f := range files {
			_ = f.Close() // the child has its own copies once started
		}
	}
	for _, l := range listeners {
		tl, ok := l.(*net.TCPListener)
		if !ok {
			release()
			return nil, fmt.Errorf("hand down %s: not a TCP listener", l.Addr())
		}
		f, err := tl.File()
		if err != nil {
			release()
			return nil, fmt.Errorf("hand down %s: %w", l.Addr(), err)
		}
		files = append(files, f)
	}
	if len(cmd.ExtraFiles) > 0 {
		release()
		return nil, fmt.Errorf("hand down: the command has other descriptors at %d", firstInheritedFD)
	}
	cmd.ExtraFiles = files
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, ListenFDsEnv+"="+strconv.Itoa(len(files)))
	return release, nil
}
