package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Files is the Store of file refs. It confines a task's local file I/O to
// the operator's file roots (LUCIUS_FILE_ROOTS) and the job's own workspace.
// Every open goes through os.Root, whose lookup is done by the operating
// system one component at a time (openat), so ".." and symbolic links that
// lead out of the root are refused even if they appear after the gateway
// checked the ref.
type Files struct {
	// roots are clean absolute folders; the job's workspace is the first.
	roots []string
}

var _ Store = Files{}

// NewFiles allows workspace (the job's, from the directive: Lucius builds
// it, a partner never names it) and roots.
func NewFiles(workspace string, roots []string) Files {
	a := Files{roots: []string{filepath.Clean(workspace)}}
	for _, r := range roots {
		a.roots = append(a.roots, filepath.Clean(r))
	}
	return a
}

// locate finds the deepest root holding path and path relative to it.
func (a Files) locate(ref, path string) (root, rel string, err error) {
	for _, r := range a.roots {
		if rp, rerr := filepath.Rel(r, path); rerr == nil && (rp == "." || filepath.IsLocal(rp)) && len(r) > len(root) {
			root, rel = r, rp
		}
	}
	if root == "" {
		roots := "no file roots are configured (LUCIUS_FILE_ROOTS)"
		if len(a.roots) > 1 {
			roots = "file roots " + strings.Join(a.roots[1:], ":")
		}
		return "", "", Permanent(CodeRefOutsideFileRoots, fmt.Errorf("ref %q: %s is outside the job's workspace, and %s",
			Clip(ref), Clip(path), roots))
	}
	return root, rel, nil
}

// errEscapes is the error os.Root gives for a path that leads out of it
// (os does not export it): taken from a lookup that escapes lexically.
var errEscapes = func() error {
	_, err := os.OpenInRoot(os.TempDir(), "../lucius-escape-probe")
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return errors.New("path escapes from parent")
}()

// escapes reports whether err is os.Root refusing a path that leads out of it.
func escapes(err error) bool { return errEscapes != nil && errors.Is(err, errEscapes) }

// Open opens a referenced file for reading, classifying what another
// attempt could not fix (outside the roots, no such file, no permission, a
// directory, a bad reference) as permanent.
func (a Files) Open(_ context.Context, ref string) (Object, error) {
	f, size, err := a.open(ref)
	if err != nil {
		return nil, err
	}
	return file{File: f, size: size}, nil
}

// file is an open local file as an Object.
type file struct {
	*os.File
	size int64
}

func (f file) Size() int64 { return f.size }

// open opens the regular file ref names and returns its size (from the one
// stat that also refuses a directory).
func (a Files) open(ref string) (*os.File, int64, error) {
	p, err := LocalPath(ref)
	if err != nil {
		return nil, 0, err
	}
	root, rel, err := a.locate(ref, p)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.OpenInRoot(root, rel)
	switch {
	case escapes(err):
		return nil, 0, Permanent(CodeRefOutsideFileRoots, fmt.Errorf("read %s: leads outside %s: %w", ref, root, err))
	case errors.Is(err, os.ErrNotExist):
		return nil, 0, Permanent(CodeInputNotFound, fmt.Errorf("read %s: %w", ref, err))
	case errors.Is(err, os.ErrPermission):
		return nil, 0, Permanent(CodeInvalidInput, fmt.Errorf("read %s: %w", ref, err))
	case err != nil:
		return nil, 0, fmt.Errorf("read %s: %w", ref, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // read only, and failing already
		return nil, 0, fmt.Errorf("read %s: %w", ref, err)
	}
	if st.IsDir() {
		_ = f.Close() // read only, and failing already
		return nil, 0, Permanent(CodeInvalidInput, fmt.Errorf("read %s: is a directory", ref))
	}
	return f, st.Size(), nil
}

// Write writes r to the file ref names (inside a root) through a temporary
// file in the same directory and a rename, so readers never see a partial
// file and a retried attempt replaces its earlier output whole.
func (a Files) Write(_ context.Context, ref string, r io.Reader, _ WriteOptions) (Written, error) {
	path, err := LocalPath(ref)
	if err != nil {
		return Written{}, err
	}
	rootDir, rel, err := a.locate(ref, path)
	if err != nil {
		return Written{}, err
	}
	if rootDir == a.roots[0] {
		// The job's workspace is made on its first write.
		if err := os.MkdirAll(rootDir, 0o755); err != nil {
			return Written{}, fmt.Errorf("create workspace %s: %w", rootDir, err)
		}
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return Written{}, fmt.Errorf("open file root %s: %w", rootDir, err)
	}
	defer root.Close()
	refused := func(op string, err error) error {
		err = fmt.Errorf("%s %s: %w", op, path, err)
		if escapes(err) {
			return Permanent(CodeRefOutsideFileRoots, err)
		}
		return err
	}
	dir := filepath.Dir(rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return Written{}, refused("create directory for", err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(rel)+"."+rand.Text()[:10]+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return Written{}, refused("create temporary file for", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()    // the write failed: that error is the one to report
			root.Remove(tmp) //nolint:errcheck
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return Written{}, fmt.Errorf("write %s: %w", path, err)
	}
	// fsync before rename: a crash must not leave a renamed but empty file.
	if err := f.Sync(); err != nil {
		return Written{}, fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return Written{}, fmt.Errorf("close %s: %w", path, err)
	}
	if err := root.Chmod(tmp, 0o644); err != nil { // whatever the umask
		return Written{}, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		return Written{}, refused("rename into", err)
	}
	committed = true
	uri := ref
	if !strings.HasPrefix(ref, "file:") {
		uri = FileURI(path)
	}
	return Written{URI: uri, SizeBytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// LocalPath turns a file reference into a local path. It accepts file://
// URLs (file:///abs/path or file://localhost/abs/path, percent-decoded per
// path segment; an escaped "/" stays inside its segment) and absolute paths
// (taken literally). A ".." segment is rejected: references are built from
// tenant ids, which must never climb out of the workspace. Anything else is
// a permanent CodeUnsupportedRef error.
func LocalPath(ref string) (string, error) {
	bad := func(format string, args ...any) error {
		return Permanent(CodeUnsupportedRef, fmt.Errorf("ref %q: "+format, append([]any{Clip(ref)}, args...)...))
	}
	if strings.ContainsRune(ref, 0) {
		return "", bad("contains NUL")
	}
	var p string
	switch {
	case strings.HasPrefix(ref, "file:"):
		u, err := url.Parse(ref)
		if err != nil {
			return "", bad("%v", err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return "", bad("file URL names host %q; want a local file", Clip(u.Host))
		}
		segs := strings.Split(u.EscapedPath(), "/")
		for i, seg := range segs {
			dec, err := url.PathUnescape(seg)
			if err != nil {
				return "", bad("%v", err)
			}
			if !strings.Contains(dec, "/") {
				seg = dec
			}
			segs[i] = seg
		}
		p = filepath.FromSlash(strings.Join(segs, "/"))
		if !filepath.IsAbs(p) {
			return "", bad("file URL has no absolute path")
		}
	case filepath.IsAbs(ref):
		p = ref
	default:
		return "", bad("want a file:// URL or an absolute path")
	}
	for _, seg := range strings.Split(filepath.ToSlash(p), "/") {
		if seg == ".." {
			return "", bad(`".." is not allowed`)
		}
	}
	if strings.ContainsRune(p, 0) {
		return "", bad("path contains NUL")
	}
	return filepath.Clean(p), nil
}

// FileURI is the file:// URL of an absolute local path.
func FileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
