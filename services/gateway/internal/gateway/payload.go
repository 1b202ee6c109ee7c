package gateway

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Defaults of PayloadLimits.
const (
	DefaultMaxPayloadBytes = 256 << 10
	DefaultMaxPayloadDepth = 64
)

// PayloadLimits bound a command's payload, which every job keeps and every
// directive carries. Zero values take the defaults.
type PayloadLimits struct {
	// MaxBytes bounds its encoded (protobuf) size. Default 256 KiB.
	MaxBytes int
	// MaxDepth bounds its nesting: the payload object is level 1, and each
	// object or list within adds one. Default 64.
	MaxDepth int
}

func (l *PayloadLimits) defaults() {
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultMaxPayloadBytes
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultMaxPayloadDepth
	}
}

// Validate reports limits that cannot work.
func (l PayloadLimits) Validate() error {
	var errs []error
	if l.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("payload MaxBytes must not be negative, not %d", l.MaxBytes))
	}
	if l.MaxDepth < 0 {
		errs = append(errs, fmt.Errorf("payload MaxDepth must not be negative, not %d", l.MaxDepth))
	}
	return errors.Join(errs...)
}

// checkPayload refuses a payload over the limits before anything walks it
// whole (conversion to a map, binding, the canonical form). It stops
// descending at the depth limit, so a payload nested thousands deep costs
// no more than one at the limit.
func checkPayload(p *structpb.Struct, l PayloadLimits) []server.Violation {
	var vs []server.Violation
	if size := proto.Size(p); size > l.MaxBytes {
		vs = append(vs, server.Violation{Field: "command.payload", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD,
			Description: fmt.Sprintf("is %d bytes encoded; at most %d", size, l.MaxBytes)})
	}
	if p != nil && structTooDeep(p, 1, l.MaxDepth) {
		vs = append(vs, server.Violation{Field: "command.payload", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD,
			Description: fmt.Sprintf("nests objects and lists more than %d levels deep", l.MaxDepth)})
	}
	return vs
}

// structTooDeep reports whether s, at level depth, nests beyond max.
func structTooDeep(s *structpb.Struct, depth, max int) bool {
	if depth > max {
		return true
	}
	for _, v := range s.GetFields() {
		if valueTooDeep(v, depth, max) {
			return true
		}
	}
	return false
}

func valueTooDeep(v *structpb.Value, depth, max int) bool {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structTooDeep(k.StructValue, depth+1, max)
	case *structpb.Value_ListValue:
		if depth+1 > max {
			return true
		}
		for _, item := range k.ListValue.GetValues() {
			if valueTooDeep(item, depth+1, max) {
				return true
			}
		}
	}
	return false
}
