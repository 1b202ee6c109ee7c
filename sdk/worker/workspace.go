package worker

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// The workspace layout (seed 004 §13.3): a job's workspace_ref is
// <root>/lucius/<tenant>/<job_id>/ and attempt n of a step of type T writes
// under <workspace_ref><lowercase T>/<n>/, so attempts never overwrite each
// other and every artifact names the attempt that made it.

// A workspace is a local folder (a file:// ref or an absolute path) or a
// prefix in Azure Blob Storage (az://account/container/path/).

// StepDir returns the local directory a step's attempt writes to when the
// workspace is local: <workspace_ref><lowercase step_type>/<attempt_no>/.
func StepDir(d *luciusv1.Directive) (string, error) {
	root, err := blob.LocalPath(d.GetWorkspaceRef())
	if err != nil {
		return "", fmt.Errorf("workspace_ref: %w", err)
	}
	return filepath.Join(root, stepPath(d)), nil
}

// StepRef returns where a step's attempt writes, in the workspace's own
// scheme, ending in "/": <workspace_ref><lowercase step_type>/<attempt_no>/.
func StepRef(d *luciusv1.Directive) (string, error) {
	if blobWorkspace(d) {
		if _, err := blob.ParseAzureRef(d.GetWorkspaceRef()); err != nil {
			return "", fmt.Errorf("workspace_ref: %w", err)
		}
		return strings.TrimSuffix(d.GetWorkspaceRef(), "/") + "/" + filepath.ToSlash(stepPath(d)) + "/", nil
	}
	dir, err := StepDir(d)
	if err != nil {
		return "", err
	}
	return blob.FileURI(dir) + "/", nil
}

// blobWorkspace reports whether the directive's workspace is in Azure Blob
// Storage rather than a local folder.
func blobWorkspace(d *luciusv1.Directive) bool { return blob.Scheme(d.GetWorkspaceRef()) == "az" }

func stepPath(d *luciusv1.Directive) string {
	return filepath.Join(strings.ToLower(d.GetStepType()), strconv.Itoa(int(d.GetAttemptNo())))
}
