package gateway

import (
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// pagedRequest is a List request.
type pagedRequest interface {
	proto.Message
	GetPageSize() int32
}

// fallbackMaxPageSize bounds the page of a List request whose page_size has no
// bound in the contract (none today: TestEveryListRequestBoundsItsPageSize).
const fallbackMaxPageSize = 500

// pageSize is a list call's page size: def when the caller sets none, at most
// the bound the contract gives its page_size (protovalidate's lte, which
// refuses a larger one first; the clamp keeps a call that skipped validation
// bounded too).
func pageSize(req pagedRequest, def int) int {
	size, limit := int(req.GetPageSize()), maxPageSize(req.ProtoReflect().Descriptor())
	switch {
	case size <= 0:
		return min(def, limit)
	case size > limit:
		return limit
	default:
		return size
	}
}

var maxPageSizes sync.Map // protoreflect.FullName → int

// maxPageSize is the lte bound of a request's page_size in the contract.
func maxPageSize(d protoreflect.MessageDescriptor) int {
	if v, ok := maxPageSizes.Load(d.FullName()); ok {
		return v.(int)
	}
	limit := fallbackMaxPageSize
	if lte, ok := pageSizeBound(d); ok {
		limit = lte
	}
	maxPageSizes.Store(d.FullName(), limit)
	return limit
}

// pageSizeBound reads the int32 lte rule of d's page_size field.
func pageSizeBound(d protoreflect.MessageDescriptor) (int, bool) {
	f := d.Fields().ByName("page_size")
	if f == nil {
		return 0, false
	}
	rules, _ := proto.GetExtension(f.Options(), validate.E_Field).(*validate.FieldRules)
	if rules == nil || !rules.GetInt32().HasLte() {
		return 0, false
	}
	return int(rules.GetInt32().GetLte()), true
}
