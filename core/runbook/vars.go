package runbook

import (
	"strconv"
	"time"
)

// FormatTime is how times render in templates and events: RFC 3339 in UTC,
// fractions of a second only when there are any (2025-03-15T00:00:00Z).
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// BatchVars are the variables of batch-level (init) steps.
func BatchVars(batchID int64, batchStart time.Time) map[string]string {
	return map[string]string{
		VarBatchID:        strconv.FormatInt(batchID, 10),
		VarBatchStartTime: FormatTime(batchStart),
	}
}

// MemberVars are the variables of a member's steps: its data columns (those
// with a value), _member_key, _batch_time, _batch_id and _batch_start_time.
func MemberVars(m Member, batchID int64, batchStart time.Time) map[string]string {
	vars := make(map[string]string, len(m.Values)+4)
	for col, v := range m.Values {
		vars[col] = v
	}
	// System variables last: they win over any stray value of the same name.
	vars[VarMemberKey] = m.Key
	vars[VarBatchTime] = FormatTime(m.BatchTime)
	vars[VarBatchID] = strconv.FormatInt(batchID, 10)
	vars[VarBatchStartTime] = FormatTime(batchStart)
	return vars
}
