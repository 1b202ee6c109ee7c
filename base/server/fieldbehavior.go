package server

import (
	"sync"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ClearOutputOnly clears, in msg and every message it holds, the fields
// the contract marks (google.api.field_behavior) = OUTPUT_ONLY: a client
// that sends back a resource it read (an update_time, an updated_by) has
// them ignored, as AIP-203 asks, rather than refused or trusted.
func ClearOutputOnly(msg proto.Message) {
	if msg == nil {
		return
	}
	clearOutputOnly(msg.ProtoReflect())
}

func clearOutputOnly(m protoreflect.Message) {
	if !m.IsValid() || !mayHoldOutputOnly(m.Descriptor()) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case outputOnly(fd):
			m.Clear(fd)
		case fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				clearOutputOnly(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					clearOutputOnly(mv.Message())
					return true
				})
			}
		default:
			clearOutputOnly(v.Message())
		}
		return true
	})
}

func outputOnly(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	for _, b := range proto.GetExtension(opts, annotations.E_FieldBehavior).([]annotations.FieldBehavior) {
		if b == annotations.FieldBehavior_OUTPUT_ONLY {
			return true
		}
	}
	return false
}

// holdsOutputOnly caches, per message type, whether it or a message it can
// hold has an OUTPUT_ONLY field, so most requests are not walked at all.
var holdsOutputOnly sync.Map // protoreflect.FullName → bool

func mayHoldOutputOnly(md protoreflect.MessageDescriptor) bool {
	if v, ok := holdsOutputOnly.Load(md.FullName()); ok {
		return v.(bool)
	}
	found := reachesOutputOnly(md, map[protoreflect.FullName]bool{})
	holdsOutputOnly.Store(md.FullName(), found)
	return found
}

// reachesOutputOnly walks md's fields; seen stops recursive types.
func reachesOutputOnly(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message()
		}
		if outputOnly(fd) || (sub != nil && reachesOutputOnly(sub, seen)) {
			return true
		}
	}
	return false
}
