package worker

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// fileAccess confines a task's local file I/O to the operator's file roots
// (Config.FileRoots, LUCIUS_FILE_ROOTS) and the job's own workspace. Every
// open goes through os.Root, whose lookup is done by the operating system one
// component at a time (openat), so ".." and symbolic links that lead out of
// the root are refused even if they appear after the gateway checked the ref.
type fileAccess struct {
	// roots are clean absolute folders; the job's workspace is the first.
	roots []string
}

// newFileAccess allows workspace (the job's, from the directive: Lucius
// builds it, a partner never names it) and roots.
func newFileAccess(workspace string, roots []string) fileAccess {
	a := fileAccess{roots: []string{filepath.Clean(workspace)}}
	for _, r := range roots {
		a.roots = append(a.roots, filepath.Clean(r))
	}
	return a
}

// locate finds the deepest root holding path and path relative to it.
func (a fileAccess) locate(ref, path string) (root, rel string, err error) {
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
		return "", "", PermanentCode(CodeRefOutsideFileRoots, fmt.Errorf("ref %q: %s is outside the job's workspace, and %s",
			clip(ref), clip(path), roots))
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

// open opens a referenced file for reading, classifying what another
// attempt could not fix (outside the roots, no such file, no permission, a
// directory, a bad reference) as permanent.
func (a fileAccess) open(ref string) (*os.File, error) {
	p, err := localPath(ref)
	if err != nil {
		return nil, err
	}
	root, rel, err := a.locate(ref, p)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenInRoot(root, rel)
	switch {
	case escapes(err):
		return nil, PermanentCode(CodeRefOutsideFileRoots, fmt.Errorf("read %s: leads outside %s: %w", ref, root, err))
	case errors.Is(err, os.ErrNotExist):
		return nil, PermanentCode(CodeInputNotFound, fmt.Errorf("read %s: %w", ref, err))
	case errors.Is(err, os.ErrPermission):
		return nil, PermanentCode(CodeInvalidInput, fmt.Errorf("read %s: %w", ref, err))
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", ref, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", ref, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, PermanentCode(CodeInvalidInput, fmt.Errorf("read %s: is a directory", ref))
	}
	return f, nil
}

// read reads at most limit bytes of a referenced file, classifying what
// another attempt could not fix as permanent.
func (a fileAccess) read(ref string, limit int64) ([]byte, error) {
	f, err := a.open(ref)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ref, err)
	}
	if int64(len(data)) > limit {
		return nil, PermanentCode(CodeInvalidInput, fmt.Errorf("read %s: larger than the %d-byte input limit", ref, limit))
	}
	return data, nil
}

// writeAtomic writes r to path (absolute, inside a root) through a temporary
// file in the same directory and a rename, so readers never see a partial
// file and a retried attempt replaces its earlier output whole. It returns
// the size and the hex SHA-256 of what it wrote.
func (a fileAccess) writeAtomic(path string, r io.Reader) (int64, string, error) {
	rootDir, rel, err := a.locate(fileURI(path), path)
	if err != nil {
		return 0, "", err
	}
	if rootDir == a.roots[0] {
		// The job's workspace is made on its first write.
		if err := os.MkdirAll(rootDir, 0o755); err != nil {
			return 0, "", fmt.Errorf("create workspace %s: %w", rootDir, err)
		}
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return 0, "", fmt.Errorf("open file root %s: %w", rootDir, err)
	}
	defer root.Close()
	refused := func(op string, err error) error {
		err = fmt.Errorf("%s %s: %w", op, path, err)
		if escapes(err) {
			return PermanentCode(CodeRefOutsideFileRoots, err)
		}
		return err
	}
	dir := filepath.Dir(rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return 0, "", refused("create directory for", err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(rel)+"."+rand.Text()[:10]+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, "", refused("create temporary file for", err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			root.Remove(tmp) //nolint:errcheck
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return 0, "", fmt.Errorf("write %s: %w", path, err)
	}
	// fsync before rename: a crash must not leave a renamed but empty file.
	if err := f.Sync(); err != nil {
		return 0, "", fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, "", fmt.Errorf("close %s: %w", path, err)
	}
	if err := root.Chmod(tmp, 0o644); err != nil { // whatever the umask
		return 0, "", fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		return 0, "", refused("rename into", err)
	}
	committed = true
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// writeFinalOutput copies the content of the step's first artifact to the
// job's output_ref and returns an ArtifactRef named "output" for it.
func (a fileAccess) writeFinalOutput(outputRef string, first *luciusv1.ArtifactRef) (*luciusv1.ArtifactRef, error) {
	src, err := localPath(first.GetUri())
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", first.GetName(), err)
	}
	dst, err := outputPath(outputRef, filepath.Base(src))
	if err != nil {
		return nil, err
	}
	f, err := a.open(first.GetUri())
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", first.GetName(), err)
	}
	defer f.Close()
	n, sum, err := a.writeAtomic(dst, f)
	if err != nil {
		return nil, fmt.Errorf("final output: %w", err)
	}
	if first.GetSha256() != "" && sum != first.GetSha256() {
		return nil, fmt.Errorf("final output: artifact %s changed since it was written (sha256 %s, want %s)",
			first.GetName(), sum, first.GetSha256())
	}
	uri := fileURI(dst)
	if strings.HasPrefix(outputRef, "file:") && !strings.HasSuffix(outputRef, "/") {
		uri = outputRef // the job's result_ref names the same file: keep it verbatim
	}
	return &luciusv1.ArtifactRef{Name: "output", Uri: uri, MediaType: first.GetMediaType(), SizeBytes: n, Sha256: sum}, nil
}
