package server

import (
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// ParseReason never panics, and a string it recognises is exactly the wire
// string of the value it returns.
func FuzzParseReason(f *testing.F) {
	for _, seed := range []string{"", "JOB_NOT_FOUND", "ERROR_REASON_JOB_NOT_FOUND", "UNSPECIFIED", "job_not_found", "REQUEST_ID_REUSED "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := ParseReason(s)
		if r != luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED && Reason(r) != s {
			t.Fatalf("ParseReason(%q) = %v, whose wire string is %q", s, r, Reason(r))
		}
	})
}
