package server

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// reasonPrefix is what buf lint's ENUM_VALUE_PREFIX puts before every
// ErrorReason value; the wire string leaves it out, so clients keep the
// reasons they switched on before the enum existed.
const reasonPrefix = "ERROR_REASON_"

// Reason is the ErrorInfo.reason string of r on the wire: its name without
// the ERROR_REASON_ prefix (ERROR_REASON_JOB_NOT_FOUND is "JOB_NOT_FOUND").
// This is the one mapping from the contract's enum to the wire.
func Reason(r luciusv1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), reasonPrefix)
}

// ParseReason is Reason's inverse: ERROR_REASON_UNSPECIFIED for a string
// no value of this contract names.
func ParseReason(s string) luciusv1.ErrorReason {
	if s == "" || strings.HasPrefix(s, reasonPrefix) {
		return luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return luciusv1.ErrorReason(luciusv1.ErrorReason_value[reasonPrefix+s])
}

// ReasonOf is the reason of a Lucius error, for clients to switch on: the
// ErrorInfo (domain "lucius") of err's status, ERROR_REASON_UNSPECIFIED when
// it has none or names a reason this contract predates.
func ReasonOf(err error) luciusv1.ErrorReason {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return ParseReason(info.GetReason())
		}
	}
	return luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}
