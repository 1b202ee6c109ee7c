package worker

import (
	"context"
	"fmt"
	"io"
	"net/url"
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
