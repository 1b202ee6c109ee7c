package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// The workspace layout (seed 004 §13.3): a job's workspace_ref is
// <root>/lucius/<tenant>/<job_id>/ and attempt n of a step of type T writes
// under <workspace_ref><lowercase T>/<n>/, so attempts never overwrite each
// other and every artifact names the attempt that made it.

// StepDir returns the local directory a step's attempt writes to:
// <workspace_ref><lowercase step_type>/<attempt_no>/.
func StepDir(d *luciusv1.Directive) (string, error) {
	root, err := localPath(d.GetWorkspaceRef())
	if err != nil {
		return "", fmt.Errorf("workspace_ref: %w", err)
	}
	return filepath.Join(root, strings.ToLower(d.GetStepType()), strconv.Itoa(int(d.GetAttemptNo()))), nil
}

// localPath turns a reference into a local path. It accepts file:// URLs
// (file:///abs/path or file://localhost/abs/path, percent-decoded per path
// segment; an escaped "/" stays inside its segment) and absolute paths (taken
// literally). A ".." segment is rejected: references are built from tenant
// ids, which must never climb out of the workspace. Other schemes are
// PermanentCode CodeUnsupportedRef: this skeleton works on local files; a fork
// that reads blobs replaces Task.ReadRef and the artifact writers.
func localPath(ref string) (string, error) {
	bad := func(format string, args ...any) error {
		return PermanentCode(CodeUnsupportedRef, fmt.Errorf("ref %q: "+format, append([]any{clip(ref)}, args...)...))
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
			return "", bad("file URL names host %q; want a local file", clip(u.Host))
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

// fileURI is the file:// URL of an absolute local path.
func fileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}

// writeFileAtomic writes r to path through a temporary file in the same
// directory and a rename, so readers never see a partial file and a retried
// attempt replaces its earlier output whole. It returns the size and the hex
// SHA-256 of what it wrote.
func writeFileAtomic(path string, r io.Reader) (int64, string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, "", fmt.Errorf("create directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, "", fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		return 0, "", fmt.Errorf("write %s: %w", path, err)
	}
	// fsync before rename: a crash must not leave a renamed but empty file.
	if err := tmp.Sync(); err != nil {
		return 0, "", fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, "", fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, "", fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, "", fmt.Errorf("rename into %s: %w", path, err)
	}
	committed = true
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// outputPath resolves output_ref for a final artifact whose file is named
// base: output_ref itself, or base inside it when output_ref ends with "/".
func outputPath(outputRef, base string) (string, error) {
	p, err := localPath(outputRef)
	if err != nil {
		return "", fmt.Errorf("output_ref: %w", err)
	}
	if strings.HasSuffix(outputRef, "/") {
		return filepath.Join(p, base), nil
	}
	return p, nil
}

// writeFinalOutput copies the content of the step's first artifact to the
// job's output_ref and returns an ArtifactRef named "output" for it.
func writeFinalOutput(outputRef string, first *luciusv1.ArtifactRef) (*luciusv1.ArtifactRef, error) {
	src, err := localPath(first.GetUri())
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", first.GetName(), err)
	}
	dst, err := outputPath(outputRef, filepath.Base(src))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", first.GetName(), err)
	}
	defer f.Close()
	n, sum, err := writeFileAtomic(dst, f)
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

// openLocal opens a referenced file for reading, classifying what another
// attempt could not fix (no such file, no permission, a directory, a bad
// reference) as permanent.
func openLocal(ref string) (*os.File, error) {
	p, err := localPath(ref)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	switch {
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

// readLocal reads at most limit bytes of a referenced file, classifying what
// another attempt could not fix as permanent.
func readLocal(ref string, limit int64) ([]byte, error) {
	f, err := openLocal(ref)
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

// contextReader fails a read once ctx has ended, so a long copy honours
// cancellation between reads.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
