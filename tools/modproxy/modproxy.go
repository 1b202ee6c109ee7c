// Package modproxy writes a Go module proxy directory (for
// GOPROXY=file://DIR) serving a module of this repository at the version a
// git tag names, as the Go command would fetch it from a real proxy: Go's
// rules for a module in a subdirectory map tag contract/vX.Y.Z to version
// vX.Y.Z of module github.com/lucius-platform/lucius/contract. It lets a
// module outside the repository `go get` the tagged contract offline.
package modproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// ModulePrefix is the path of the repository's root; its modules live in
// subdirectories named like the tags' prefixes.
const ModulePrefix = "github.com/lucius-platform/lucius/"

// Build writes into out the module that tag (dir/vX.Y.Z) names, from the
// tagged tree of the repository at repo, and returns the module's path and
// version.
func Build(ctx context.Context, repo, tag, out string) (path, version string, err error) {
	i := strings.LastIndex(tag, "/")
	if i < 0 || !semver.IsValid(tag[i+1:]) {
		return "", "", fmt.Errorf("tag %q is not <module dir>/vX.Y.Z", tag)
	}
	dir, version := tag[:i], tag[i+1:]
	path = ModulePrefix + dir
	src, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(src)
	if err := extract(ctx, repo, tag, dir, src); err != nil {
		return "", "", err
	}
	at := filepath.Join(out, path, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return "", "", err
	}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return "", "", err
	}
	if err := zip.CreateFromDir(f, module.Version{Path: path, Version: version}, filepath.Join(src, dir)); err != nil {
		_ = f.Close() // zipping failed: that error is the one to report
		return "", "", fmt.Errorf("zip %s@%s: %w", path, version, err)
	}
	if err := f.Close(); err != nil {
		return "", "", fmt.Errorf("zip %s@%s: %w", path, version, err)
	}
	mod, err := os.ReadFile(filepath.Join(src, dir, "go.mod"))
	if err != nil {
		return "", "", err
	}
	info, err := json.Marshal(map[string]string{"Version": version, "Time": commitTime(ctx, repo, tag)})
	if err != nil {
		return "", "", err
	}
	for name, data := range map[string][]byte{version + ".mod": mod, version + ".info": info} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return "", "", err
		}
	}
	return path, version, addToList(filepath.Join(at, "list"), version)
}

// extract writes dir of the tagged tree under dst.
func extract(ctx context.Context, repo, tag, dir, dst string) error {
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", tag, dir)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	if err := archive.Start(); err != nil {
		return err
	}
	if out, err := untar.CombinedOutput(); err != nil {
		_ = archive.Wait()
		return fmt.Errorf("tar: %w: %s", err, out)
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive %s %s: %w: %s", tag, dir, err, stderr.Bytes())
	}
	return nil
}

// commitTime is the tagged commit's time (RFC 3339), so the .info file is
// the same every time it is built.
func commitTime(ctx context.Context, repo, tag string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "log", "-1", "--format=%cI", tag).Output()
	if t, perr := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err == nil && perr == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return time.Unix(0, 0).UTC().Format(time.RFC3339)
}

func addToList(list, version string) error {
	old, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, v := range strings.Fields(string(old)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(list, append(old, version+"\n"...), 0o644) //nolint:gosec // G703: the proxy folder this tool builds
}
