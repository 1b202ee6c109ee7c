package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/tools/stack"
)

// A worker a partner team writes with the scaffold joins a running suite:
// `lucius worker new`, `go build`, `lucius worker env` and start it; it
// announces REVERSE, the scaffold's workflow registers, and a job through
// it SUCCEEDS — without restarting any Lucius process. It is not parallel:
// building a Go module is a burst of CPU the other suites' timings should
// not share.
func TestScaffoldedWorkerJoinsARunningSuite(t *testing.T) {
	s := startSuite(t, suiteOptions{})
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, name := range s.Names() {
		pids[name] = s.Process(name).Pid()
	}

	dir := filepath.Join(t.TempDir(), "reverser")
	lucius := filepath.Join(binDir, "lucius")
	run(t, "", lucius, "worker", "new", "reverser", "--handlers", "REVERSE", "--dir", dir, "--lucius", root)
	bin := filepath.Join(dir, "reverser-worker")
	run(t, dir, "go", "build", "-o", bin, ".")
	joined := exportedEnv(t, run(t, "", lucius, "worker", "env", "reverser", "--data", s.DataDir))

	w := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LUCIUS_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			w.Env = append(w.Env, kv)
		}
	}
	for k, v := range joined {
		w.Env = append(w.Env, k+"="+v)
	}
	logs := &stack.LogBuffer{}
	w.Stdout, w.Stderr = logs, logs
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		w.Wait()                          //nolint:errcheck
		if t.Failed() {
			t.Logf("reverser worker:\n%s", logs.Tail(100))
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := s.rest("GET", "/v1/workers?service=reverser", nil)
		if b, _ := json.Marshal(body); strings.Contains(string(b), `"REVERSE"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("REVERSE never announced: %v", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, errOut, code := s.cli(s.operator, "workflow", "register", filepath.Join(dir, "workflow.yaml")); code != 0 {
		t.Fatalf("workflow register: exit %d\n%s%s", code, out, errOut)
	}
	partner := s.partner("acme")
	outRef, outPath := s.output("reversed.txt")
	if out, errOut, code := s.cli(partner, "submit", "--type", "reverser", "--tenant", "acme",
		"--input-ref", s.input("reverse.txt", "one\ntwo\n"), "--output-ref", outRef, "--wait"); code != 0 {
		t.Fatalf("submit --wait: exit %d (want 0: SUCCEEDED)\n%s%s", code, out, errOut)
	}
	if got, err := os.ReadFile(outPath); err != nil || string(got) != "one\ntwo\n" {
		t.Errorf("output %q (%v): the scaffold's stub copies its input", got, err)
	}
	for name, pid := range pids {
		if now := s.Process(name).Pid(); now != pid {
			t.Errorf("%s restarted (pid %d, then %d)", name, pid, now)
		}
	}
}

// run runs a command in dir (outside any workspace) and returns its stdout.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, errOut.String())
	}
	return string(out)
}

// exportedEnv reads `export K='V'` lines, as a POSIX shell would.
func exportedEnv(t *testing.T, out string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
			t.Fatalf("lucius worker env printed %q", sc.Text())
		}
		env[k] = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
	}
	if env["LUCIUS_WORKER_SERVICE"] != "reverser" || env["LUCIUS_GATEWAY_TARGET"] == "" || env["LUCIUS_AUTH_TOKEN_FILE"] == "" {
		t.Fatalf("lucius worker env: %v", env)
	}
	return env
}
