// Command lucius-openapi finishes the OpenAPI 3 document protoc-gen-openapi
// generates from proto/ (see package openapidoc) and writes the one the
// gateway serves: make generate runs it after buf generate.
//
//	lucius-openapi -in .build/openapi/openapi.yaml -descriptors .build/openapi/lucius.binpb \
//	  -version-file contract/VERSION -out contract/openapi/lucius.openapi.json
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/lucius-platform/lucius/tools/openapidoc"
)

func main() {
	in := flag.String("in", ".build/openapi/openapi.yaml", "protoc-gen-openapi's document")
	descriptors := flag.String("descriptors", ".build/openapi/lucius.binpb", "proto/ as a FileDescriptorSet with source info (buf build --as-file-descriptor-set)")
	versionFile := flag.String("version-file", "contract/VERSION", "the contract's version")
	out := flag.String("out", "contract/openapi/lucius.openapi.json", "the document to write")
	flag.Parse()
	if err := run(*in, *descriptors, *versionFile, *out); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-openapi:", err)
		os.Exit(1)
	}
}

func run(in, descriptors, versionFile, out string) error {
	generated, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(descriptors)
	if err != nil {
		return err
	}
	fds := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(raw, fds); err != nil {
		return fmt.Errorf("read %s: %w", descriptors, err)
	}
	version, err := os.ReadFile(versionFile)
	if err != nil {
		return err
	}
	doc, err := openapidoc.Finish(openapidoc.Input{Generated: generated, Descriptors: fds, Version: strings.TrimSpace(string(version))})
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(doc, '\n'), 0o644)
}
