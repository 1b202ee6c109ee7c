package scheduler

// liveStatuses are the batch statuses a version transition moves; member
// changes follow batches in init_dispatched and active only.
var (
	liveStatuses   = []string{"detected", "init_dispatched", "active"}
	memberStatuses = []string{"init_dispatched", "active"}
)
