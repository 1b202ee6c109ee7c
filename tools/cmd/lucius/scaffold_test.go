package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewScaffoldChecksNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		worker   string
		handlers []string
		wantErr  string
	}{
		{"one handler", "reverser", []string{"REVERSE"}, ""},
		{"several handlers", "raster-ops", []string{"raster_validate", "RasterCog"}, ""},
		{"an upper-case worker name", "Reverser", []string{"REVERSE"}, "want a service name"},
		{"a worker name with a slash", "a/b", []string{"REVERSE"}, "want a service name"},
		{"no handler", "reverser", nil, "name at least one handler"},
		{"a handler with a space", "reverser", []string{"RE VERSE"}, `handler "RE VERSE"`},
		{"a handler starting with a digit", "reverser", []string{"1OCR"}, `handler "1OCR"`},
		{"handlers differing in case only", "reverser", []string{"ocr", "OCR"}, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := newScaffold(tc.worker, tc.handlers, "", "")
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if got := goName("raster_cog_fa"); got != "RasterCogFa" {
		t.Errorf("goName = %q", got)
	}
}

// FuzzScaffoldNames: whatever the names, the scaffold refuses them or
// renders Go that parses (go/format runs on every .go file it writes).
func FuzzScaffoldNames(f *testing.F) {
	f.Add("reverser", "REVERSE")
	f.Add("raster-ops", "raster_validate,RasterCog")
	f.Add("x", "a,b,c")
	f.Fuzz(func(t *testing.T, name, handlers string) {
		s, err := newScaffold(name, strings.Split(handlers, ","), "", "")
		if err != nil {
			return
		}
		if _, err := s.write(filepath.Join(t.TempDir(), "w")); err != nil {
			t.Fatalf("names %q %q passed the checks but did not render: %v", name, handlers, err)
		}
	})
}

// TestWorkerNewWritesAModuleThatTestsAndBuilds is the scaffold as a new
// user meets it: outside this repository, `lucius worker new` then
// `go test ./...` and `go build ./...` pass, with no runtime code copied
// and replace lines only into this checkout.
func TestWorkerNewWritesAModuleThatTestsAndBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	t.Parallel()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "reverser")
	cmd := rootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"worker", "new", "reverser", "--handlers", "REVERSE", "--dir", dir, "--lucius", root})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("worker new: %v\n%s", err, out.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "go.sum" { // go.sum lists checksums, not code
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > 100 {
			t.Errorf("%s has %d lines: runtime code was copied", e.Name(), n)
		}
	}
	main, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(main, []byte("\n")); n > 40 {
		t.Errorf("main.go has %d lines, want at most 40", n)
	}
	mod, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	replaces := 0
	for sc := bufio.NewScanner(mod); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "replace ") {
			continue
		}
		replaces++
		from, to, _ := strings.Cut(strings.TrimPrefix(line, "replace "), " => ")
		rel, err := filepath.Rel(root, to)
		if !strings.HasPrefix(from, "github.com/lucius-platform/lucius/") || err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("go.mod: %q replaces outside this checkout", line)
		}
	}
	if replaces == 0 {
		t.Error("go.mod has no replace into this checkout: an offline build cannot work")
	}
	// Then as the user would, in the new module, outside this workspace.
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}, {"build", "./..."}} {
		c := exec.Command("go", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		if b, err := c.CombinedOutput(); err != nil {
			t.Fatalf("go %s in the new module: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	for _, want := range []string{"main.go", "reverse.go", "reverse_test.go", "workflow.yaml", "Dockerfile", "README.md", "go.sum"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("missing %s: %v", want, err)
		}
	}
}
