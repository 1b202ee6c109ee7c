// Package nodeproc runs the Node.js servers Lucius's tests start (the
// Service Bus test broker, Azurite): it installs a tool's pinned npm
// packages with `npm ci` from tools/<tool>/package-lock.json into
// .build/<tool> when they are missing (the Makefile's targets do the same),
// starts a script with node, waits for the line saying it listens and stops
// it. Without node or npm Start fails with ErrNoNode: a skipped test would
// pass without testing anything.
package nodeproc

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
	"syscall"
	"time"

	"github.com/lucius-platform/lucius/base/freeport"
)

// ErrNoNode says node or npm is missing.
var ErrNoNode = errors.New("node and npm are needed")

// Spec describes a server to start.
type Spec struct {
	// Tool names the folder under tools/ holding package.json and
	// package-lock.json; the packages are installed in .build/<Tool>.
	Tool string
	// Script is the script node runs, given the repository root and the
	// installed node_modules folder.
	Script func(root, modules string) string
	Args   []string
	// Ready is the start of the stdout line the server prints once it
	// listens.
	Ready string
	// Timeout bounds the wait for Ready. Default 30s.
	Timeout time.Duration
}

// Process is a running server.
type Process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	out   *syncBuffer
}

// Start installs the tool's packages if needed, starts the server and waits
// until it prints spec.Ready.
func Start(ctx context.Context, spec Spec) (*Process, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, ErrNoNode
	}
	root, err := repoRoot(spec.Tool)
	if err != nil {
		return nil, err
	}
	modules, err := install(ctx, root, spec.Tool)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(node, append([]string{spec.Script(root, modules)}, spec.Args...)...)
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
		return nil, fmt.Errorf("start %s: %w", spec.Tool, err)
	}
	p := &Process{cmd: cmd, stdin: stdin, done: make(chan struct{}), out: out}
	ready := make(chan struct{})
	go func() {
		// Read stdout to its end before Wait, which closes the pipe: the
		// last lines (why the server exited) are then in Output.
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			// Kept before Start returns: the ready line is in Output.
			out.Write(append(sc.Bytes(), '\n')) //nolint:errcheck
			if strings.HasPrefix(sc.Text(), spec.Ready) {
				once.Do(func() { close(ready) })
			}
		}
		io.Copy(io.Discard, stdout) //nolint:errcheck // a line too long for the scanner
		cmd.Wait()                  //nolint:errcheck
		close(p.done)
	}()
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before listening: %s", spec.Tool, out.String())
	case <-time.After(timeout):
		p.Stop()
		return nil, fmt.Errorf("%s did not listen within %v: %s", spec.Tool, timeout, out.String())
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// StartOnFreePorts starts the server spec describes on n free ports (spec
// puts them in its Args) and returns them; a start that loses a port to
// another process (EADDRINUSE) is tried again on new ports (freeport.Retry).
func StartOnFreePorts(ctx context.Context, n int, spec func(ports []int) Spec) (*Process, []int, error) {
	var p *Process
	var used []int
	err := freeport.Retry(n, pickPort, func(ports []int) (err error) {
		used = ports
		p, err = Start(ctx, spec(ports))
		return err
	}, func(err error) bool { return strings.Contains(err.Error(), "EADDRINUSE") })
	if err != nil {
		return nil, nil, err
	}
	return p, used, nil
}

// pickPort picks a port to try (a test picks a taken one first).
var pickPort = freeport.Port

// Install installs tools/<tool>'s pinned packages into .build/<tool>
// unless they are there already (as Start does), for a test that runs the
// tool's commands rather than a server; it returns the repository root and
// the node_modules directory.
func Install(ctx context.Context, tool string) (root, modules string, err error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", "", ErrNoNode
	}
	if root, err = repoRoot(tool); err != nil {
		return "", "", err
	}
	modules, err = install(ctx, root, tool)
	return root, modules, err
}

// Stop ends the server (stdin closed, then SIGTERM, then after 5 s SIGKILL)
// and waits for it.
func (p *Process) Stop() {
	p.stdin.Close()
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited already
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck
		<-p.done
	}
}

// Output is what the server printed so far.
func (p *Process) Output() string { return p.out.String() }

// repoRoot is the directory holding tools/<tool>/package-lock.json, found
// upwards from the working directory (tests run in their package's
// directory).
func repoRoot(tool string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	marker := filepath.Join("tools", tool, "package-lock.json")
	for {
		if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory", marker)
		}
		dir = parent
	}
}

var installMu sync.Mutex

// install runs `npm ci` from tools/<tool>'s package files into
// .build/<tool> unless the same lock file was installed there already, and
// returns the node_modules directory.
func install(ctx context.Context, root, tool string) (string, error) {
	installMu.Lock()
	defer installMu.Unlock()
	src := filepath.Join(root, "tools", tool)
	dst := filepath.Join(root, ".build", tool)
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
		return "", ErrNoNode
	}
	// Install into a fresh directory and rename it, so test binaries that
	// start at once never see a half-installed tree.
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), tool+"-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil { //nolint:gosec // G703: tmp is our own temp dir, f a name from the tool's fixed file list
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %w: %s", tmp, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "installed-lock.json"), lock, 0o644); err != nil { //nolint:gosec // G703: paths under .build, of our own making
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
