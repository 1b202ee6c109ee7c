package scheduler

import "github.com/lucius-platform/lucius/core/runbook"

// liveStatuses are the batch statuses a version transition moves; member
// changes follow batches in init_dispatched and active only.
var (
	liveStatuses   = []string{runbook.BatchDetected, runbook.BatchInitDispatched, runbook.BatchActive}
	memberStatuses = []string{runbook.BatchInitDispatched, runbook.BatchActive}
)
