package apistatus

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

var memberProblem = regexp.MustCompile(`^row (\d+): (.*)$`)

// invalidMembers turns the problems of CheckMembers ("row 3: unknown column
// \"colour\" ...") into violations of the fields they name
// (members[3].values.colour).
func invalidMembers(err error) error {
	msg := err.Error()
	// The problems follow the first line (the error's context).
	_, list, ok := strings.Cut(msg, "\n")
	if !ok {
		list = msg
	}
	var vs []server.Violation
	for _, line := range strings.Split(list, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			vs = append(vs, memberViolation(line))
		}
	}
	return server.InvalidArgument(vs...).Err()
}

// memberViolation is the violation of one refused row's problem, on the
// field it names when it names one.
func memberViolation(line string) server.Violation {
	v := server.Violation{Field: "members", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS, Description: line}
	m := memberProblem.FindStringSubmatch(line)
	if m == nil {
		return v
	}
	problem := m[2]
	v.Field, v.Description = "members["+m[1]+"]", problem
	switch {
	case strings.HasPrefix(problem, "member_key"):
		v.Field += ".member_key"
	case strings.HasPrefix(problem, "batch_time"):
		v.Field += ".batch_time"
	case strings.HasPrefix(problem, "unknown column "):
		if q, err := strconv.QuotedPrefix(strings.TrimPrefix(problem, "unknown column ")); err == nil {
			if col, err := strconv.Unquote(q); err == nil {
				v.Field += valuesField(col)
			}
		}
	case strings.HasPrefix(problem, "column "):
		col, _, _ := strings.Cut(strings.TrimPrefix(problem, "column "), " ")
		v.Field += valuesField(col)
	}
	return v
}

var simpleKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// valuesField names a key of the values map: .values.colour, or
// .values["odd key"] when the key is not a plain identifier.
func valuesField(key string) string {
	if simpleKey.MatchString(key) {
		return ".values." + key
	}
	return ".values[" + strconv.Quote(key) + "]"
}
