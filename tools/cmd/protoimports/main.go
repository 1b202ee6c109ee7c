// Command protoimports prints the third-party .proto files that proto/ imports
// (google/api/*.proto, buf/validate/validate.proto, the openapiv2 options) from
// the descriptors compiled into pinned Go modules. The files are never committed:
// go.mod pins their versions and this program recreates them offline.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	_ "github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2/options"
	"github.com/jhump/protoreflect/desc" //nolint:staticcheck // protoprint, which writes the .proto files, takes its descriptors
	"github.com/jhump/protoreflect/desc/protoprint"
	_ "google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// roots are the files proto/ imports directly; their non-WKT dependencies follow.
var roots = []string{
	"google/api/annotations.proto",
	"google/api/field_behavior.proto",
	"buf/validate/validate.proto",
	"protoc-gen-openapiv2/options/annotations.proto",
}

func main() {
	out := flag.String("out", ".build/protodeps", "directory to write the .proto files into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "protoimports:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	files := map[string]protoreflect.FileDescriptor{}
	var collect func(fd protoreflect.FileDescriptor)
	collect = func(fd protoreflect.FileDescriptor) {
		path := fd.Path()
		if strings.HasPrefix(path, "google/protobuf/") || files[path] != nil {
			return // buf ships the well-known types itself
		}
		files[path] = fd
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			collect(imports.Get(i).FileDescriptor)
		}
	}
	for _, root := range roots {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(root)
		if err != nil {
			return fmt.Errorf("find %s: %w", root, err)
		}
		collect(fd)
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	printer := &protoprint.Printer{}
	for _, p := range paths {
		wrapped, err := desc.WrapFile(files[p])
		if err != nil {
			return fmt.Errorf("wrap %s: %w", p, err)
		}
		dst := filepath.Join(out, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		if err := printer.PrintProtoFile(wrapped, f); err != nil {
			_ = f.Close() // printing failed: that error is the one to report
			return fmt.Errorf("print %s: %w", p, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
