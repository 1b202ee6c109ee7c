package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestConfigContextsAndOverrides(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(`current-context: local
contexts:
  local: {addr: "127.0.0.1:9090", token: t-local}
  prod: {addr: "lucius.example.com:443", token-file: `+filepath.Join(dir, "tok")+`, tls: {ca-file: /ca.pem}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tok"), []byte("t-prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, context, envAddr, envToken string
		addr, token                      string
		wantErr                          bool
	}{
		{name: "current context", addr: "127.0.0.1:9090", token: "t-local"},
		{name: "named context, token file", context: "prod", addr: "lucius.example.com:443", token: "t-prod"},
		{name: "environment overrides", context: "prod", envAddr: "10.0.0.1:9090", envToken: "t-env", addr: "10.0.0.1:9090", token: "t-env"},
		{name: "unknown context", context: "nope", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("LUCIUS_ADDR", tt.envAddr)
			t.Setenv("LUCIUS_TOKEN", tt.envToken)
			opts, err := cfg.resolve(tt.context)
			if (err != nil) != tt.wantErr {
				t.Fatalf("resolve: %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if exitCode(err) != exitUsage {
					t.Fatalf("an unknown context exits %d, want %d", exitCode(err), exitUsage)
				}
				return
			}
			tok, err := opts.token(t.Context())
			if err != nil || opts.Addr != tt.addr || tok != tt.token {
				t.Fatalf("got %s %q (%v), want %s %q", opts.Addr, tok, err, tt.addr, tt.token)
			}
		})
	}
	if _, err := loadConfig(filepath.Join(dir, "missing.yaml")); err != nil {
		t.Fatalf("a missing file is an empty configuration: %v", err)
	}
	if err := os.WriteFile(path, []byte("contexts:\n  x: {adr: typo}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err == nil {
		t.Fatal("an unknown field is accepted")
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{status.Error(codes.Unavailable, "down"), exitUnreachable},
		{status.Error(codes.DeadlineExceeded, "slow"), exitUnreachable},
		{status.Error(codes.NotFound, "no job"), exitNotFound},
		{status.Error(codes.PermissionDenied, "no"), exitDenied},
		{status.Error(codes.Unauthenticated, "who"), exitDenied},
		{status.Error(codes.InvalidArgument, "bad"), exitError},
		{usageErrorf("bad flag"), exitUsage},
		{&codedError{code: exitFailed, err: errors.New("failed")}, exitFailed},
		{errors.New("anything else"), exitError},
	} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// FuzzLoadConfig: any file is read or refused with an error, never a panic.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte("current-context: a\ncontexts:\n  a: {addr: x, token: y}\n"))
	f.Add([]byte("contexts: [1, 2]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if cfg, err := loadConfig(path); err == nil {
			cfg.resolve("") //nolint:errcheck // must not panic
		}
	})
}

func TestUIRefusesAMalformedJobIDBeforeCalling(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"ui", "--job", "not-a-job"}, exitUsage},
		{[]string{"ui", "--job", "ABCDEF0000000000000000000000000000000000000000000000000000000000"}, exitUsage},
		{[]string{"ui", "extra"}, exitUsage},
	} {
		cmd := rootCommand()
		cmd.SetArgs(tt.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if got := exitCode(cmd.Execute()); got != tt.want {
			t.Fatalf("lucius %v exits %d, want %d", tt.args, got, tt.want)
		}
	}
}
