package gateway

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
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

// Page tokens are opaque to callers: base64url of the JSON of a cursor (the
// last item's sort key). A token this API did not return is refused with
// INVALID_PAGE_TOKEN.

func encodeToken(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(tok string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// encodeIDToken is the page token of lists ordered by a numeric id.
func encodeIDToken(id int64) string { return encodeToken(strconv.FormatInt(id, 10)) }

// decodeIDToken reads an encodeIDToken token, 0 when there is none; an id
// below minID is not one this API returned.
func decodeIDToken(tok string, minID int64) (int64, error) {
	if tok == "" {
		return 0, nil
	}
	var raw string
	if err := decodeToken(tok, &raw); err != nil {
		return 0, invalidPageToken()
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < minID {
		return 0, invalidPageToken()
	}
	return id, nil
}

// decodeKeyToken reads the token of a list ordered by a string key: "" for
// the first page.
func decodeKeyToken(tok string) (string, error) {
	var after string
	if tok != "" {
		if err := decodeToken(tok, &after); err != nil || after == "" {
			return "", invalidPageToken()
		}
	}
	return after, nil
}

// decodeCursor reads the token of a list ordered by a composite cursor (the
// zero cursor and false for the first page); valid says whether a decoded
// cursor is one this API could have returned.
func decodeCursor[C any](tok string, valid func(C) bool) (C, bool, error) {
	var c C
	if tok == "" {
		return c, false, nil
	}
	if err := decodeToken(tok, &c); err != nil || !valid(c) {
		return c, false, invalidPageToken()
	}
	return c, true, nil
}

// cutPage trims a list read with one row more than size and returns the
// token of the next page: cursor's token of the page's last item, or "" when
// the list was the last page.
func cutPage[T any](list []T, size int, cursor func(T) string) ([]T, string) {
	if len(list) <= size {
		return list, ""
	}
	list = list[:size]
	return list, cursor(list[size-1])
}

func invalidPageToken() error {
	return server.InvalidArgument(server.Violation{Field: "page_token", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN,
		Description: "is not a token this API returned"}).Err()
}
