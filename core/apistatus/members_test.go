package apistatus

import (
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func TestMemberViolationsNameTheirFields(t *testing.T) {
	t.Parallel()
	tests := []struct{ problem, field, description string }{
		{`row 3: unknown column "colour" (columns: email)`, "members[3].values.colour", `unknown column "colour" (columns: email)`},
		{`row 0: unknown column "a\"b" (columns: none)`, `members[0].values["a\"b"]`, `unknown column "a\"b" (columns: none)`},
		{`row 12: column email must be UTF-8 text without NUL characters`, "members[12].values.email", "column email must be UTF-8 text without NUL characters"},
		{`row 1: member_key "k" repeats row 0`, "members[1].member_key", `member_key "k" repeats row 0`},
		{`row 2: batch_time is missing`, "members[2].batch_time", "batch_time is missing"},
		{`row 4: something new`, "members[4]", "something new"},
		{`… and more`, "members", "… and more"},
	}
	for _, tt := range tests {
		v := memberViolation(tt.problem)
		if v.Field != tt.field || v.Description != tt.description || v.Reason != luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS {
			t.Errorf("%q: %+v, want field %q description %q", tt.problem, v, tt.field, tt.description)
		}
	}
}
