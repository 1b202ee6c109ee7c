package openapidoc

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// descriptors declares WatchJob server-streaming, and ErrorReason when withReasons.
func descriptors(withReasons bool) *descriptorpb.FileDescriptorSet {
	f := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("lucius/v1/job.proto"),
		Package: proto.String("lucius.v1"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("JobService"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("GetJob")},
				{Name: proto.String("WatchJob"), ServerStreaming: proto.Bool(true)},
			},
		}},
	}
	fds := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{f}}
	if withReasons {
		fds.File = append(fds.File, &descriptorpb.FileDescriptorProto{
			Name:    proto.String("lucius/v1/error_reason.proto"),
			Package: proto.String("lucius.v1"),
			EnumType: []*descriptorpb.EnumDescriptorProto{{
				Name: proto.String("ErrorReason"),
				Value: []*descriptorpb.EnumValueDescriptorProto{
					{Name: proto.String("ERROR_REASON_UNSPECIFIED"), Number: proto.Int32(0)},
					{Name: proto.String("ERROR_REASON_JOB_NOT_FOUND"), Number: proto.Int32(1)},
					{Name: proto.String("ERROR_REASON_WATCH_BEHIND"), Number: proto.Int32(2)},
				},
			}},
			SourceCodeInfo: &descriptorpb.SourceCodeInfo{Location: []*descriptorpb.SourceCodeInfo_Location{
				{Path: []int32{5, 0, 2, 1}, LeadingComments: proto.String(" No job with that id\n for the caller.\n")},
			}},
		})
	}
	return fds
}

// finish runs Finish on testdata/generated.yaml and decodes the result.
func finish(t *testing.T, withReasons bool) map[string]any {
	t.Helper()
	gen, err := os.ReadFile("testdata/generated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Finish(Input{Generated: gen, Descriptors: descriptors(withReasons), Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// at walks keys through nested objects; nil when one is missing.
func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestFinishAnswersWithTheGatewaysCodesErrorsAndSecurity(t *testing.T) {
	t.Parallel()
	doc := finish(t, false)
	for _, tc := range []struct {
		path, method string
		responses    []string
		streaming    bool
	}{
		{"/v1/commands", "post", []string{"202", "400", "401", "403", "409", "413", "429", "503", "default"}, false},
		{"/v1/jobs/{job_id}:watch", "get", []string{"200", "400", "401", "403", "404", "409", "503", "default"}, true},
		{"/v1/config/tenants/{tenant_id}", "get", []string{"200", "400", "401", "403", "404", "429", "503", "default"}, false},
		{"/v1/config/tenants/{tenant_id}", "put", []string{"200", "400", "401", "403", "404", "409", "429", "503", "default"}, false},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			op := at(doc, "paths", tc.path, tc.method)
			if op == nil {
				t.Fatalf("no operation; paths: %v", keys(doc["paths"]))
			}
			if got := keys(at(op, "responses")); !slices.Equal(got, tc.responses) {
				t.Errorf("responses %v, want %v", got, tc.responses)
			}
			sec, _ := at(op, "security").([]any)
			if len(sec) != 1 || at(sec[0], BearerScheme) == nil {
				t.Errorf("security %v, want the bearer scheme", sec)
			}
			if got := at(op, streamMarker) != nil; got != tc.streaming {
				t.Errorf("marked streaming: %v, want %v", got, tc.streaming)
			}
			content := keys(at(op, "responses", tc.responses[0], "content"))
			if tc.streaming && !slices.Equal(content, []string{"application/json", "text/event-stream"}) {
				t.Errorf("stream content %v, want NDJSON and Server-Sent Events", content)
			}
		})
	}
	if got := at(doc, "paths", "/v1/jobs/{job_id}:watch", "get", "responses", "200", "content", "application/json", "schema", "properties", "result", "$ref"); got != "#/components/schemas/lucius.v1.WatchJobResponse" {
		t.Errorf("a stream line's result is %v", got)
	}
	if _, nested := at(doc, "paths").(map[string]any)["/v1/config/tenants/{config.tenant_id}"]; nested {
		t.Error("the path naming {config.tenant_id} is still there")
	}
	if got := at(doc, "paths", "/v1/config/tenants/{tenant_id}", "put", "parameters").([]any)[0].(map[string]any)["name"]; got != "tenant_id" {
		t.Errorf("parameter %v, want tenant_id", got)
	}
}

func TestFinishSetsInfoServersAndTheBearerScheme(t *testing.T) {
	t.Parallel()
	doc := finish(t, false)
	for _, tc := range []struct {
		keys []string
		want any
	}{
		{[]string{"info", "version"}, "1.2.3"},
		{[]string{"info", "title"}, "Lucius API"},
		{[]string{"components", "securitySchemes", BearerScheme, "scheme"}, "bearer"},
		{[]string{"components", "securitySchemes", BearerScheme, "bearerFormat"}, "JWT"},
		{[]string{"tags"}, []any{map[string]any{"name": "CommandService", "description": "CommandService accepts commands.\nTwo lines."}}},
	} {
		got := at(doc, tc.keys...)
		if tc.keys[0] == "tags" {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Errorf("%v = %s, want %s", tc.keys, gb, wb)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%v = %v, want %v", tc.keys, got, tc.want)
		}
	}
	if at(doc, "info", "contact", "name") == nil || at(doc, "info", "description") == nil {
		t.Error("info lacks a contact or a description")
	}
	if servers, _ := doc["servers"].([]any); len(servers) == 0 || at(servers[0], "url") != "/" {
		t.Errorf("servers %v, want the serving gateway (/) first", servers)
	}
	for path, want := range map[string]any{
		"/v1/jobs/{job_id}/steps/{step_id}/attempts/{attempt_no}:ack": "http://127.0.0.1:8081",
		"/v1/commands": nil, // the document's servers: the gateway
	} {
		method := keys(at(doc, "paths", path))[0]
		servers, _ := at(doc, "paths", path, method, "servers").([]any)
		var got any
		if len(servers) > 0 {
			got = at(servers[0], "url")
		}
		if got != want {
			t.Errorf("%s %s is served at %v, want %v", method, path, got, want)
		}
	}
	if d := at(doc, "paths", "/v1/commands", "post", "description"); d != "Submit accepts a command.\nREST answers 202." {
		t.Errorf("description %q: the generator's leading spaces are not removed", d)
	}
}

func TestFinishTakesTheReasonsFromTheErrorReasonEnumWhenTheContractHasIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		withReasons bool
		enum        []any
	}{
		{"without the enum, reason is a string", false, nil},
		{"with the enum, its values without prefix and UNSPECIFIED", true, []any{"JOB_NOT_FOUND", "WATCH_BEHIND"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := finish(t, tc.withReasons)
			schemas := at(doc, "components", "schemas")
			if got := at(schemas, "google.rpc.Status", "properties", "details", "items", "oneOf"); got == nil {
				t.Fatal("Status.details does not name ErrorInfo")
			}
			reason := at(schemas, "google.rpc.ErrorInfo", "properties", "reason")
			enum, _ := at(schemas, "lucius.v1.ErrorReason", "enum").([]any)
			if !slices.Equal(enum, tc.enum) {
				t.Errorf("ErrorReason enum %v, want %v", enum, tc.enum)
			}
			if tc.withReasons {
				if at(reason, "allOf") == nil {
					t.Errorf("ErrorInfo.reason %v does not refer to the enum", reason)
				}
				if d, _ := at(schemas, "lucius.v1.ErrorReason", "description").(string); !strings.Contains(d, "`JOB_NOT_FOUND`: No job with that id for the caller.") {
					t.Errorf("enum description %q lacks the values' comments", d)
				}
			} else if at(reason, "type") != "string" {
				t.Errorf("ErrorInfo.reason %v, want a string", reason)
			}
		})
	}
}

func TestFinishRefusesWhatItCannotFinish(t *testing.T) {
	t.Parallel()
	gen, err := os.ReadFile("testdata/generated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   Input
	}{
		{"no version", Input{Generated: gen, Descriptors: descriptors(false)}},
		{"no paths", Input{Generated: []byte("openapi: 3.0.3\n"), Descriptors: descriptors(false), Version: "1.0.0"}},
		{"an operation without operationId", Input{Generated: []byte("paths:\n  /x:\n    get:\n      responses: {\"200\": {description: OK}}\n"), Descriptors: descriptors(false), Version: "1.0.0"}},
		{"not YAML", Input{Generated: []byte("{"), Descriptors: descriptors(false), Version: "1.0.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Finish(tc.in); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// The committed document carries the contract's version and documents
// every operation (Spectral, in make openapi-lint, checks the rest).
func TestCommittedDocumentFollowsTheContractVersion(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../contract/openapi/lucius.openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	version, err := os.ReadFile("../../contract/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if got, want := at(doc, "info", "version"), strings.TrimSpace(string(version)); got != want {
		t.Errorf("info.version %v, want contract/VERSION's %s: run make generate", got, want)
	}
	streams := 0
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if d, _ := at(op, "description").(string); d == "" {
				t.Errorf("%s %s has no description", method, path)
			}
			if at(op, streamMarker) != nil {
				streams++
			}
		}
	}
	if streams != 2 {
		t.Errorf("%d streaming operations, want 2 (WatchJob, WatchJobs)", streams)
	}
}

func TestPathFieldsAreNotRequiredInRequestBodies(t *testing.T) {
	schemas := map[string]any{
		"lucius.v1.CancelJobRequest": map[string]any{"required": []any{"job_id"}},
		"lucius.v1.AckRequest":       map[string]any{"required": []any{"job_id", "lease_id"}},
		"lucius.v1.TenantConfig":     map[string]any{"required": []any{"tenant_id"}},
		"lucius.v1.GetTenantConfigResponse": map[string]any{"properties": map[string]any{
			"config": map[string]any{"$ref": schemaRefRoot + "lucius.v1.TenantConfig"}}},
	}
	body := func(schema string) map[string]any {
		return map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": schemaRefRoot + schema}}}}
	}
	pathParam := func(name string) map[string]any { return map[string]any{"name": name, "in": "path"} }
	paths := map[string]any{
		"/v1/jobs/{job_id}:cancel": map[string]any{"post": map[string]any{
			"parameters": []any{pathParam("job_id")}, "requestBody": body("lucius.v1.CancelJobRequest")}},
		"/v1/jobs/{job_id}:ack": map[string]any{"post": map[string]any{
			"parameters": []any{pathParam("job_id")}, "requestBody": body("lucius.v1.AckRequest")}},
		"/v1/config/tenants/{tenant_id}": map[string]any{"put": map[string]any{
			"parameters": []any{pathParam("tenant_id")}, "requestBody": body("lucius.v1.TenantConfig")}},
	}
	pathFieldsOptionalInBodies(paths, schemas)
	required := func(name string) any { return schemas[name].(map[string]any)["required"] }
	if r := required("lucius.v1.CancelJobRequest"); r != nil {
		t.Errorf("CancelJobRequest still requires %v", r)
	}
	if r := asSlice(required("lucius.v1.AckRequest")); len(r) != 1 || r[0] != "lease_id" {
		t.Errorf("AckRequest requires %v, want [lease_id]", r)
	}
	if r := asSlice(required("lucius.v1.TenantConfig")); len(r) != 1 || r[0] != "tenant_id" {
		t.Errorf("TenantConfig, also a response, lost its required tenant_id: %v", r)
	}
	if r := required("lucius.v1.TenantConfig.Body"); r != nil {
		t.Errorf("the body copy of TenantConfig requires %v", r)
	}
	put := paths["/v1/config/tenants/{tenant_id}"].(map[string]any)["put"].(map[string]any)
	ref := put["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["$ref"]
	if ref != schemaRefRoot+"lucius.v1.TenantConfig.Body" {
		t.Errorf("the tenant PUT's body is %v", ref)
	}
}
