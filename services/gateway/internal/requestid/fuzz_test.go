package requestid

import (
	"testing"
	"unicode/utf8"

	"buf.build/go/protovalidate"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// validRequestID is the rule the contract states for request_id: empty
// (none), or 1 to 64 printable ASCII characters without spaces.
func validRequestID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '!' || id[i] > '~' {
			return false
		}
	}
	return true
}

// The contract's protovalidate rule on request_id accepts exactly what
// validRequestID does, and the interceptor reads back what was sent.
func FuzzRequestIDRule(f *testing.F) {
	for _, seed := range []string{"", "a", "0b6f4c1e-7f3a-4d6e-9c2b-1f0e8d7a6b5c", "order-4711/retry#2", "with space",
		"tab\there", "é", "\x00", string(make([]byte, 64)), "0123456789012345678901234567890123456789012345678901234567890123",
		"01234567890123456789012345678901234567890123456789012345678901234"} {
		f.Add(seed)
	}
	v, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !utf8.ValidString(id) {
			return // proto3 strings are UTF-8; the decoder refuses the rest first
		}
		req := &luciusv1.CancelJobRequest{JobId: jobID, RequestId: id}
		accepted := v.Validate(req) == nil
		if accepted != validRequestID(id) {
			t.Fatalf("request_id %q: protovalidate accepted=%v, the documented rule says %v", id, accepted, validRequestID(id))
		}
		if RequestID(req) != id {
			t.Fatalf("RequestID read %q, sent %q", RequestID(req), id)
		}
	})
}
