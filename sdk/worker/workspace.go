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

// StepDir returns the local directory a step's attempt writes to:
// <workspace_ref><lowercase step_type>/<attempt_no>/. The workspace is a
// file:// ref (or an absolute path); blob.LocalPath says which.
func StepDir(d *luciusv1.Directive) (string, error) {
	root, err := blob.LocalPath(d.GetWorkspaceRef())
	if err != nil {
		return "", fmt.Errorf("workspace_ref: %w", err)
	}
	return filepath.Join(root, strings.ToLower(d.GetStepType()), strconv.Itoa(int(d.GetAttemptNo()))), nil
}
