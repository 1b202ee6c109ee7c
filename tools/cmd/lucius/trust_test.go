package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/auth"
)

// lucius trust lays out an issuer, callback keys and worker tokens the
// services accept: each token authenticates as a worker of its pool's
// services against the issuer's jwks.json; a second run keeps the issuer
// and the keys and mints the tokens anew.
func TestTrustCreatesWhatTheServicesTrust(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := trustCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("lucius trust %v: %v", args, err)
		}
		return out.String()
	}
	out := run(dir, "--worker", "ocr", "--worker", "raster, tiles,demo")
	for _, want := range []string{"LUCIUS_AUTH_JWKS_FILE=" + filepath.Join(dir, "issuer", "jwks.json"),
		"LUCIUS_CALLBACK_KEYS_FILE=" + filepath.Join(dir, "secrets", "callback-keys"),
		"LUCIUS_AUTH_TOKEN_FILE=" + filepath.Join(dir, "tokens", "raster-tiles-demo.jwt")} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	keys, err := os.ReadFile(filepath.Join(dir, "secrets", "callback-keys"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadCallbackKeys(filepath.Join(dir, "secrets", "callback-keys")); err != nil {
		t.Fatalf("the callback keys do not load: %v", err)
	}
	authn, err := auth.NewAuthenticator(auth.Config{JWKSFile: filepath.Join(dir, "issuer", "jwks.json")})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, "tokens", "raster-tiles-demo.jwt"))
	for file, services := range map[string][]string{"ocr.jwt": {"ocr"}, "raster-tiles-demo.jwt": {"raster", "tiles", "demo"}} {
		tok, err := os.ReadFile(filepath.Join(dir, "tokens", file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := authn.Authenticate(context.Background(), strings.TrimSpace(string(tok)))
		if err != nil {
			t.Fatalf("%s does not authenticate: %v", file, err)
		}
		if !p.Has(auth.RoleWorker) || !slices.Equal(p.Services, services) {
			t.Errorf("%s: roles %v services %v, want a worker of %v", file, p.Roles, p.Services, services)
		}
	}

	run(dir, "--worker", "raster,tiles,demo")
	again, _ := os.ReadFile(filepath.Join(dir, "secrets", "callback-keys"))
	if !bytes.Equal(keys, again) {
		t.Error("a second run replaced the callback keys")
	}
	second, _ := os.ReadFile(filepath.Join(dir, "tokens", "raster-tiles-demo.jwt"))
	if bytes.Equal(first, second) {
		t.Error("a second run kept the old worker token")
	}
	if _, err := authn.Authenticate(context.Background(), strings.TrimSpace(string(second))); err != nil {
		t.Errorf("the second run's token does not authenticate with the kept issuer: %v", err)
	}

	cmd := trustCommand()
	cmd.SetArgs([]string{dir, "--worker", " , "})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.ExecuteContext(context.Background()); exitCode(err) != exitUsage {
		t.Errorf("--worker naming nothing: %v, want a usage error", err)
	}
}
