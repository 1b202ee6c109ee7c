package server

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/lucius-platform/lucius/contract/lucius/v1" // registers the contract
)

// The contract's field behaviours and its validation agree (AIP-203): in
// every message a client sends, a field is REQUIRED exactly when the
// protovalidate rules refuse it empty, every field says its behaviour, and
// messages only Lucius sends are OUTPUT_ONLY throughout.
func TestFieldBehaviorsMatchTheValidationRules(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("lucius.v1", func(fd protoreflect.FileDescriptor) bool {
		forEachMessage(fd.Messages(), func(md protoreflect.MessageDescriptor) {
			if strings.HasSuffix(string(md.Name()), "Response") {
				return
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				t.Errorf("%s: %v", md.FullName(), err)
				return
			}
			refused := map[string]bool{}
			var verr *protovalidate.ValidationError
			if err := v.Validate(mt.New().Interface()); errors.As(err, &verr) {
				for _, vi := range verr.Violations {
					if path := protovalidate.FieldPathString(vi.Proto.GetField()); path != "" {
						refused[strings.SplitN(path, ".", 2)[0]] = true
					}
				}
			}
			fields := md.Fields()
			for i := 0; i < fields.Len(); i++ {
				f := fields.Get(i)
				bs := behaviors(f)
				if len(bs) == 0 {
					t.Errorf("%s.%s has no google.api.field_behavior", md.FullName(), f.Name())
					continue
				}
				required := slices.Contains(bs, annotations.FieldBehavior_REQUIRED)
				if required != refused[string(f.Name())] {
					t.Errorf("%s.%s: REQUIRED=%v but the validation rules refuse it empty=%v", md.FullName(), f.Name(), required, refused[string(f.Name())])
				}
				checked++
			}
		})
		return true
	})
	if checked < 300 {
		t.Fatalf("checked %d fields: the contract is not registered", checked)
	}
}

func forEachMessage(ms protoreflect.MessageDescriptors, fn func(protoreflect.MessageDescriptor)) {
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		if md.IsMapEntry() {
			continue
		}
		fn(md)
		forEachMessage(md.Messages(), fn)
	}
}

func behaviors(fd protoreflect.FieldDescriptor) []annotations.FieldBehavior {
	if fd.Options() == nil {
		return nil
	}
	return proto.GetExtension(fd.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior)
}
