package config

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FileRoots are the folders file:// refs may name (LUCIUS_FILE_ROOTS). They
// are a process setting, not live configuration: they describe the machine's
// filesystem, which only the operator who starts the process knows. Empty
// refuses every file:// ref.
type FileRoots []string

// ParseFileRoots reads a colon-separated list of absolute folders (the
// LUCIUS_FILE_ROOTS format); empty entries are skipped, each root is cleaned.
func ParseFileRoots(list string) (FileRoots, error) {
	var roots FileRoots
	var errs []error
	for _, r := range filepath.SplitList(list) {
		r = strings.TrimSpace(r)
		switch {
		case r == "":
			continue
		case !filepath.IsAbs(r):
			errs = append(errs, fmt.Errorf("file root %q is not an absolute path", r))
		case filepath.Clean(r) == "/":
			errs = append(errs, errors.New(`file root "/" would allow every file`))
		default:
			roots = append(roots, filepath.Clean(r))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("LUCIUS_FILE_ROOTS: %w", err)
	}
	return roots, nil
}

// Check reports whether path (absolute, as a parsed file:// ref holds it)
// lies inside a root, both as written and once symbolic links are resolved
// (as far as the path exists on this machine): a link inside a root pointing
// out of it is refused. nil means allowed.
func (r FileRoots) Check(path string) *RefProblem {
	outside := func(format string, args ...any) *RefProblem {
		return &RefProblem{Reason: luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS, Description: fmt.Sprintf(format, args...)}
	}
	if len(r) == 0 {
		return outside("file refs are not allowed: the operator configured no file roots (LUCIUS_FILE_ROOTS)")
	}
	if strings.ContainsRune(path, 0) || !filepath.IsAbs(path) {
		return outside("file refs need an absolute path")
	}
	clean := filepath.Clean(path)
	if !r.contains(clean, false) {
		return outside("%s is outside the allowed file roots (%s)", clean, strings.Join(r, ", "))
	}
	if !r.contains(resolveExisting(clean), true) {
		return outside("%s leads outside the allowed file roots through a symbolic link", clean)
	}
	return nil
}

// contains reports whether path is a root or lies under one; resolved
// compares against the roots with their own links resolved.
func (r FileRoots) contains(path string, resolved bool) bool {
	for _, root := range r {
		if resolved {
			root = resolveExisting(root)
		}
		if within(root, path) {
			return true
		}
	}
	return false
}

// within reports whether path is root or lies under it (both clean and absolute).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// resolveExisting resolves the symbolic links of the longest part of path
// that exists and appends the rest unchanged ("" when an existing part
// cannot be resolved).
func resolveExisting(path string) string {
	rest := ""
	for p := path; ; {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(resolved, rest)
		}
		if _, err := os.Lstat(p); err == nil {
			return "" // exists but does not resolve (a dangling link): inside no root
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
