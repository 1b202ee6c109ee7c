package modproxy

import (
	"archive/zip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The proxy serves the module of a tag as Go fetches it: list, .info, .mod
// and a zip whose files sit under path@version/, without the other modules.
func TestBuildServesTheTaggedModule(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("contract/go.mod", "module github.com/lucius-platform/lucius/contract\n\ngo 1.26.0\n")
	write("contract/doc.go", "package contract\n")
	write("core/go.mod", "module github.com/lucius-platform/lucius/core\n")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "c")
	git("tag", "contract/v1.2.3")
	write("contract/later.go", "package contract\n") // not in the tag

	out := t.TempDir()
	path, version, err := Build(context.Background(), repo, "contract/v1.2.3", out)
	if err != nil {
		t.Fatal(err)
	}
	if path != "github.com/lucius-platform/lucius/contract" || version != "v1.2.3" {
		t.Fatalf("%s@%s", path, version)
	}
	at := filepath.Join(out, path, "@v")
	for name, want := range map[string]string{"list": "v1.2.3\n", "v1.2.3.mod": "module github.com/lucius-platform/lucius/contract"} {
		got, err := os.ReadFile(filepath.Join(at, name))
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
	}
	z, err := zip.OpenReader(filepath.Join(at, "v1.2.3.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var files []string
	for _, f := range z.File {
		files = append(files, f.Name)
	}
	if want := path + "@v1.2.3/doc.go " + path + "@v1.2.3/go.mod"; strings.Join(files, " ") != want {
		t.Errorf("zip holds %v, want %s", files, want)
	}
	for _, bad := range []string{"contract", "contract/1.2.3", "contract/v9.9.9"} {
		if _, _, err := Build(context.Background(), repo, bad, t.TempDir()); err == nil {
			t.Errorf("tag %q: no error", bad)
		}
	}
}
