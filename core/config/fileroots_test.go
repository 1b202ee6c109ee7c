package config

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFileRoots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    FileRoots
		wantErr string
	}{
		{"", nil, ""},
		{"/srv/in", FileRoots{"/srv/in"}, ""},
		{"/srv/in/:/tmp//x:", FileRoots{"/srv/in", "/tmp/x"}, ""},
		{" /a : /b ", FileRoots{"/a", "/b"}, ""},
		{"relative/dir", nil, "not an absolute path"},
		{"/srv:/", nil, `"/" would allow every file`},
	}
	for _, tt := range tests {
		got, err := ParseFileRoots(tt.in)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseFileRoots(%q) = %v, %v; want error with %q", tt.in, got, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("ParseFileRoots(%q): %v", tt.in, err)
		case strings.Join(got, ":") != strings.Join(tt.want, ":"):
			t.Errorf("ParseFileRoots(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A layout on disk: root/in.txt, root/sub/, root/out (a link to outside/),
// root/dangling (a link to nothing), root/inner (a link to root/sub), and a
// second root reached through a link (linkedroot -> realroot).
func fileRootsLayout(t *testing.T) (dir string, roots FileRoots) {
	t.Helper()
	dir = t.TempDir()
	for _, d := range []string{"root/sub", "outside", "realroot"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"root/in.txt", "outside/secret", "realroot/in.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"root/out": "../outside", "root/dangling": "/nonexistent/lucius",
		"root/inner": "sub", "linkedroot": "realroot"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, FileRoots{filepath.Join(dir, "root"), filepath.Join(dir, "linkedroot")}
}

func TestFileRootsCheckConfinesPathsToRoots(t *testing.T) {
	t.Parallel()
	dir, roots := fileRootsLayout(t)
	tests := []struct {
		path    string
		allowed bool
	}{
		{"root/in.txt", true},
		{"root", true},
		{"root/sub/new/out.json", true}, // need not exist yet
		{"root/inner/x.txt", true},      // a link that stays inside
		{"linkedroot/in.txt", true},     // the root itself is a link
		{"outside/secret", false},
		{"rootx/in.txt", false}, // a sibling sharing the prefix
		{"root/out/secret", false},
		{"root/out", false},
		{"root/out/new.json", false},
		{"root/dangling/x", false},
		{"root/../outside/secret", false},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.path)
		if strings.Contains(tt.path, "..") {
			p = dir + "/" + tt.path // keep the .. for Check to see
		}
		got := roots.Check(p)
		if tt.allowed != (got == nil) {
			t.Errorf("Check(%s) = %+v, want allowed %v", tt.path, got, tt.allowed)
		}
		if got != nil && (got.Reason != luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS || got.Description == "") {
			t.Errorf("Check(%s) = %+v", tt.path, got)
		}
	}
	for _, p := range []string{"/etc/passwd", "relative/in.txt", "/tmp/x\x00y"} {
		if roots.Check(p) == nil {
			t.Errorf("Check(%q) allowed", p)
		}
	}
}

func TestFileRootsCheckWithoutRootsRefusesEverything(t *testing.T) {
	t.Parallel()
	if p := FileRoots(nil).Check("/data/in.txt"); p == nil || !strings.Contains(p.Description, "LUCIUS_FILE_ROOTS") {
		t.Errorf("no roots: %+v, want a refusal naming LUCIUS_FILE_ROOTS", p)
	}
}

// Whatever the path, an allowed one is lexically inside a root.
func FuzzFileRootsCheck(f *testing.F) {
	for _, seed := range []string{"/data/in.txt", "/data/../etc/passwd", "/data", "/datax/y", "//data//a", "/data/./a/../..",
		"relative", "", "/data/\x00"} {
		f.Add(seed)
	}
	roots := FileRoots{"/data", "/srv/lucius/files"}
	f.Fuzz(func(t *testing.T, path string) {
		if roots.Check(path) != nil {
			return
		}
		clean := filepath.Clean(path)
		if !within("/data", clean) && !within("/srv/lucius/files", clean) {
			t.Fatalf("%q allowed outside the roots", path)
		}
		if rel, _ := filepath.Rel("/", clean); strings.HasPrefix(rel, "..") {
			t.Fatalf("%q allowed climbing out of /", path)
		}
	})
}
