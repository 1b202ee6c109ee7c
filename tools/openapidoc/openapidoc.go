// Package openapidoc finishes the OpenAPI 3 document that protoc-gen-openapi
// (google/gnostic) generates from proto/ into the one the gateway serves at
// /openapi.json (contract/openapi/lucius.openapi.json). The generator writes
// paths, schemas, tags and descriptions from the proto comments; it cannot
// say what only the gateway knows, which this package adds:
//
//   - info: the contract's version (contract/VERSION), a description and a contact;
//   - servers, and the bearer (OIDC) security scheme required by every operation;
//   - the success codes the gateway really answers (202 for Submit);
//   - the error model: google.rpc.Status whose details carry a
//     google.rpc.ErrorInfo (domain "lucius"), and the 4xx answers of every
//     operation; the reasons come from the enum lucius.v1.ErrorReason when
//     the contract declares it;
//   - server-streaming RPCs (WatchJob, WatchJobs) marked as streams, with the
//     NDJSON and Server-Sent Events bodies grpc-gateway writes;
//   - path templates that OpenAPI cannot name ({config.tenant_id}).
//
// Everything it adds is derived from the descriptors (streaming, the reason
// enum) or is a fact of the gateway kept here in one place: the generated
// file is never edited by hand.
package openapidoc

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Input is what Finish reads.
type Input struct {
	// Generated is protoc-gen-openapi's YAML document.
	Generated []byte
	// Descriptors are proto/'s files (buf build --as-file-descriptor-set):
	// which methods stream, and the ErrorReason enum when it exists.
	Descriptors *descriptorpb.FileDescriptorSet
	// Version is the contract's version (contract/VERSION, e.g. 0.2.0).
	Version string
}

// Security scheme and the names of shared components.
const (
	BearerScheme  = "bearer"
	statusSchema  = "google.rpc.Status"
	errorInfo     = "google.rpc.ErrorInfo"
	reasonEnum    = "lucius.v1.ErrorReason"
	reasonPrefix  = "ERROR_REASON_"
	errorDomain   = "lucius"
	streamMarker  = "x-lucius-streaming"
	schemaRefRoot = "#/components/schemas/"
)

// successCodes are the codes the gateway answers instead of 200, by
// operationId (services/gateway's acceptedFor202).
var successCodes = map[string]string{
	"CommandService_Submit": "202",
}

// orchestratorServers serve the services the orchestrators serve, not the
// gateway: a worker's callbacks.
var orchestratorServers = []any{
	map[string]any{"url": "http://127.0.0.1:8081", "description": "An orchestrator `make up` starts (CallbackService is served by the orchestrators, not the gateway)."},
	map[string]any{
		"url":         "{scheme}://{host}",
		"description": "Your deployment's orchestrators.",
		"variables": map[string]any{
			"scheme": map[string]any{"default": "https", "enum": []any{"https", "http"}},
			"host":   map[string]any{"default": "lucius-orchestrator.internal", "description": "An orchestrator's HTTP host and port."},
		},
	},
}

// servedByOrchestrators are the services (tags) only the orchestrators serve.
var servedByOrchestrators = map[string]bool{"CallbackService": true}

// errorResponses are the 4xx and 5xx answers every operation may give:
// grpc-gateway maps the gRPC code to the HTTP status
// (runtime.HTTPStatusFromCode) and writes the google.rpc.Status as JSON.
var errorResponses = []struct {
	code, name, description string
	applies                 func(o opShape) bool // nil: every operation
}{
	{"400", "BadRequest", "INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE: the request is invalid; ErrorInfo.reason says why and a BadRequest detail names the fields.", nil},
	{"401", "Unauthorized", "UNAUTHENTICATED: no bearer token, or one that is expired, not signed by a trusted issuer or for another audience. The answer carries a WWW-Authenticate challenge.", nil},
	{"403", "Forbidden", "PERMISSION_DENIED: the token's role or tenants do not allow this call.", nil},
	{"404", "NotFound", "NOT_FOUND: no such resource, or one of a tenant the caller may not see.", func(o opShape) bool { return o.pathParams }},
	{"409", "Conflict", "ALREADY_EXISTS or ABORTED: the request conflicts with the resource's state (a reused idempotency key, a stale revision), or a stream fell behind (WATCH_BEHIND).",
		func(o opShape) bool { return o.method != "get" || o.streaming }},
	{"413", "PayloadTooLarge", "RESOURCE_EXHAUSTED (REQUEST_TOO_LARGE): the body is larger than the gateway accepts.", func(o opShape) bool { return o.body }},
	{"429", "TooManyRequests", "RESOURCE_EXHAUSTED: an admission or rate limit; retry after the Retry-After header's seconds.", func(o opShape) bool { return !o.streaming }},
	{"503", "Unavailable", "UNAVAILABLE: the gateway or its database cannot serve now; retry with backoff.", nil},
}

// opShape is what decides which errors an operation documents.
type opShape struct {
	method     string
	pathParams bool // it names a resource in its path
	streaming  bool
	body       bool // it takes a request body
}

// Finish turns the generated document into the served one, as indented JSON.
func Finish(in Input) ([]byte, error) {
	if in.Version == "" {
		return nil, fmt.Errorf("openapidoc: no contract version")
	}
	var doc map[string]any
	if err := yaml.Unmarshal(in.Generated, &doc); err != nil {
		return nil, fmt.Errorf("read generated document: %w", err)
	}
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("generated document has no paths")
	}
	components := object(doc, "components")
	schemas := object(components, "schemas")
	streams := streamingMethods(in.Descriptors)

	doc["info"] = info(in.Version)
	doc["servers"] = []any{
		map[string]any{"url": "/", "description": "The gateway serving this document (/openapi.json, /docs)."},
		map[string]any{"url": "http://127.0.0.1:8080", "description": "The gateway `make up` starts."},
		map[string]any{
			"url":         "{scheme}://{host}",
			"description": "Your deployment's gateway.",
			"variables": map[string]any{
				"scheme": map[string]any{"default": "https", "enum": []any{"https", "http"}},
				"host":   map[string]any{"default": "lucius.internal", "description": "The gateway's host and port."},
			},
		},
	}
	object(components, "securitySchemes")[BearerScheme] = map[string]any{
		"type":         "http",
		"scheme":       "bearer",
		"bearerFormat": "JWT",
		"description": "An OIDC access token (a JWT) from an issuer the gateway trusts (LUCIUS_AUTH_ISSUERS, e.g. " +
			"Microsoft Entra ID; on `make up`, `lucius token` mints one from the local issuer). Its audience must be the " +
			"gateway's (default `lucius`); its claims name the caller's role (`roles`: partner, operator) and tenants " +
			"(`lucius_tenants`). Another tenant's resources answer NOT_FOUND.",
	}
	doc["security"] = []any{map[string]any{BearerScheme: []any{}}}
	errorModel(schemas, in.Descriptors)
	responses := object(components, "responses")
	for _, r := range errorResponses {
		responses[r.name] = map[string]any{
			"description": r.description,
			"content":     jsonContent(ref(statusSchema)),
		}
	}
	responses["Error"] = map[string]any{
		"description": "Any other error (e.g. INTERNAL: 500), as a google.rpc.Status.",
		"content":     jsonContent(ref(statusSchema)),
	}

	renamed := map[string]any{}
	for path, item := range paths {
		newPath := openAPIPath(path)
		ops, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("path %s is not an object", path)
		}
		for method, v := range ops {
			op, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s %s is not an operation", method, path)
			}
			if err := finishOperation(op, opShape{method: method, pathParams: strings.Contains(path, "{")}, streams); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
		// {config.tenant_id} becomes {tenant_id}: the same path as the
		// tenant's other operations, whose item it joins.
		merged := object(renamed, newPath)
		for method, op := range ops {
			if _, dup := merged[method]; dup {
				return nil, fmt.Errorf("%s %s: another operation has the same method and path", method, newPath)
			}
			merged[method] = op
		}
	}
	doc["paths"] = renamed
	// Before the .Body copies, which share their originals' nested maps:
	// each description is tidied once.
	tidyDescriptions(schemas)
	pathFieldsOptionalInBodies(renamed, schemas)
	if tags, ok := doc["tags"].([]any); ok {
		for _, t := range tags {
			if tag, ok := t.(map[string]any); ok {
				if d, ok := tag["description"].(string); ok {
					tag["description"] = tidy(d)
				}
			}
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// pathFieldsOptionalInBodies drops from a request body's required fields
// those its route's path carries: with `body: "*"` the gateway takes them from
// the path (the body's field, when sent, must be equal). A schema that is
// used elsewhere too (as a response, inside another schema) keeps its
// required list; the body gets a copy, named <schema>.Body.
func pathFieldsOptionalInBodies(paths, schemas map[string]any) {
	elsewhere := map[string]bool{}
	var walk func(v any, inBody bool)
	walk = func(v any, inBody bool) {
		switch t := v.(type) {
		case map[string]any:
			for k, child := range t {
				if k == "$ref" && !inBody {
					if r, ok := child.(string); ok {
						elsewhere[strings.TrimPrefix(r, schemaRefRoot)] = true
					}
				}
				walk(child, inBody || k == "requestBody")
			}
		case []any:
			for _, child := range t {
				walk(child, inBody)
			}
		}
	}
	walk(paths, false)
	walk(schemas, false)
	for _, item := range paths {
		ops, _ := item.(map[string]any)
		for _, v := range ops {
			op, _ := v.(map[string]any)
			body, ok := op["requestBody"].(map[string]any)
			if !ok {
				continue
			}
			schemaRef := object(object(object(body, "content"), "application/json"), "schema")
			name := strings.TrimPrefix(fmt.Sprint(schemaRef["$ref"]), schemaRefRoot)
			schema, ok := schemas[name].(map[string]any)
			if !ok {
				continue
			}
			inPath := map[string]bool{}
			for _, p := range asSlice(op["parameters"]) {
				if param, ok := p.(map[string]any); ok && param["in"] == "path" {
					inPath[fmt.Sprint(param["name"])] = true
				}
			}
			var kept []any
			for _, f := range asSlice(schema["required"]) {
				if !inPath[fmt.Sprint(f)] {
					kept = append(kept, f)
				}
			}
			if len(kept) == len(asSlice(schema["required"])) {
				continue
			}
			if elsewhere[name] {
				copied := map[string]any{}
				for k, v := range schema {
					copied[k] = v
				}
				schema, name = copied, name+".Body"
				schemas[name] = schema
				schemaRef["$ref"] = schemaRefRoot + name
			}
			if len(kept) == 0 {
				delete(schema, "required")
			} else {
				schema["required"] = kept
			}
		}
	}
}

func info(version string) map[string]any {
	return map[string]any{
		"title":   "Lucius API",
		"version": version,
		"description": "Lucius is a control plane for multi-step work: partners submit commands, Lucius runs each " +
			"one as a job (a workflow whose steps are routed to the platform services that own them) and reports " +
			"its state. This document describes the REST mapping of the gRPC contract (package lucius.v1, module " +
			"github.com/lucius-platform/lucius/contract); the gateway serves it at /openapi.json and a viewer at /docs.\n\n" +
			"Every call needs a bearer token (see the `bearer` security scheme). Errors are google.rpc.Status objects " +
			"whose details carry a google.rpc.ErrorInfo with domain `lucius` and a reason clients switch on. JSON uses " +
			"the proto field names; enums are their value names. The version is the contract's (contract/VERSION, " +
			"tagged contract/vX.Y.Z; changes in contract/CHANGELOG.md).",
		"contact": map[string]any{
			"name": "Lucius platform team",
			"url":  "https://github.com/lucius-platform/lucius",
		},
	}
}

// finishOperation sets an operation's success code, error answers,
// security and streaming bodies.
func finishOperation(op map[string]any, shape opShape, streams map[string]bool) error {
	id, _ := op["operationId"].(string)
	if id == "" {
		return fmt.Errorf("no operationId")
	}
	if d, ok := op["description"].(string); ok {
		op["description"] = tidy(d)
	}
	if s, ok := op["summary"].(string); ok {
		op["summary"] = tidy(s)
	} else if _, rpc, ok := strings.Cut(id, "_"); ok {
		op["summary"] = rpc // the RPC's name: what viewers list beside the path
	}
	for _, p := range asSlice(op["parameters"]) {
		param, ok := p.(map[string]any)
		if !ok {
			continue
		}
		if name, _ := param["name"].(string); strings.Contains(name, ".") && param["in"] == "path" {
			param["name"] = pathParamName(name)
			if param["description"] == nil {
				param["description"] = fmt.Sprintf("The request's %s (the body's field of that name must be empty or equal).", name)
			}
		}
		if d, ok := param["description"].(string); ok {
			param["description"] = tidy(d)
		}
	}
	responses, ok := op["responses"].(map[string]any)
	if !ok {
		return fmt.Errorf("no responses")
	}
	ok200, ok := responses["200"].(map[string]any)
	if !ok {
		return fmt.Errorf("no 200 response")
	}
	delete(responses, "200")
	code := "200"
	if c, ok := successCodes[id]; ok {
		code = c
		ok200["description"] = "Accepted: the command is stored and its job runs asynchronously; follow it with GetJob or WatchJob."
	}
	shape.streaming = streams[id]
	shape.body = op["requestBody"] != nil
	if shape.streaming {
		if err := streamBody(op, ok200); err != nil {
			return err
		}
	}
	responses[code] = ok200
	delete(responses, "default")
	for _, r := range errorResponses {
		if r.applies != nil && !r.applies(shape) {
			continue
		}
		responses[r.code] = map[string]any{"$ref": "#/components/responses/" + r.name}
	}
	responses["default"] = map[string]any{"$ref": "#/components/responses/Error"}
	op["security"] = []any{map[string]any{BearerScheme: []any{}}}
	for _, tag := range asSlice(op["tags"]) {
		if name, _ := tag.(string); servedByOrchestrators[name] {
			op["servers"] = orchestratorServers
		}
	}
	return nil
}

// streamBody describes what grpc-gateway writes for a server-streaming RPC:
// one JSON object a line, {"result": message} or, when the stream fails,
// {"error": status}; with Accept: text/event-stream each object is one
// Server-Sent Event's data.
func streamBody(op, resp map[string]any) error {
	content, _ := resp["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	msg, _ := media["schema"].(map[string]any)
	if msg == nil {
		return fmt.Errorf("streaming method without a response schema")
	}
	chunk := map[string]any{
		"type": "object",
		"description": "One line of the stream: `result`, a message of the stream, or `error`, the status that " +
			"ended it (e.g. ABORTED with reason WATCH_BEHIND: resume with after_event_id).",
		"properties": map[string]any{
			"result": msg,
			"error":  ref(statusSchema),
		},
	}
	resp["description"] = "A server stream: newline-delimited JSON (one object a line, flushed as each message " +
		"is sent; the response's Content-Type is application/json), or Server-Sent Events with " +
		"`Accept: text/event-stream` (each object in one `data:` line)."
	resp["content"] = map[string]any{
		"application/json": map[string]any{"schema": chunk},
		"text/event-stream": map[string]any{"schema": map[string]any{
			"type":        "string",
			"description": "Server-Sent Events: `data: <one stream object as JSON>` followed by a blank line, per message.",
		}},
	}
	op[streamMarker] = "server"
	if d, _ := op["description"].(string); !strings.Contains(d, "server stream") {
		op["description"] = strings.TrimSpace(d + "\n\nThis is a server stream (gRPC server streaming; REST: NDJSON or Server-Sent Events).")
	}
	return nil
}

// errorModel documents google.rpc.Status's details as ErrorInfo and, when
// the contract declares lucius.v1.ErrorReason, the reasons as that enum.
func errorModel(schemas map[string]any, fds *descriptorpb.FileDescriptorSet) {
	reason := map[string]any{
		"type": "string",
		"description": "The reason of the error, in UPPER_SNAKE_CASE, stable: clients switch on it (AIP-193). " +
			"The reasons are the values of the enum lucius.v1.ErrorReason without its ERROR_REASON_ prefix.",
	}
	if values, descriptions := reasonValues(fds); len(values) > 0 {
		enum := map[string]any{"type": "string", "enum": values, "description": "The reasons of Lucius errors (lucius.v1.ErrorReason):\n\n" + strings.Join(descriptions, "\n")}
		schemas[reasonEnum] = enum
		reason = map[string]any{"allOf": []any{ref(reasonEnum)}, "description": "Why the call failed; clients switch on it (AIP-193)."}
	}
	schemas[errorInfo] = map[string]any{
		"type": "object",
		"description": "Describes the cause of an error with structured details (google.rpc.ErrorInfo, AIP-193). " +
			"Every Lucius error carries one in google.rpc.Status.details, with `@type` " +
			"`type.googleapis.com/google.rpc.ErrorInfo`.",
		"properties": map[string]any{
			"@type":  map[string]any{"type": "string", "description": "`type.googleapis.com/google.rpc.ErrorInfo`."},
			"reason": reason,
			"domain": map[string]any{"type": "string", "description": "The domain of the error: `" + errorDomain + "` for every Lucius error."},
			"metadata": map[string]any{
				"type":                 "object",
				"additionalProperties": map[string]any{"type": "string"},
				"description":          "Additional structured details about the error (e.g. the field, the limit).",
			},
		},
	}
	st := object(schemas, statusSchema)
	props := object(st, "properties")
	details := object(props, "details")
	details["items"] = map[string]any{"oneOf": []any{ref(errorInfo), ref("google.protobuf.Any")}}
	details["description"] = "The error's details: a google.rpc.ErrorInfo (domain `lucius`, a reason clients switch on), " +
		"and others such as google.rpc.BadRequest (the invalid fields) or google.rpc.RetryInfo."
}

// reasonValues lists lucius.v1.ErrorReason's values as the reasons clients
// see (without the enum's prefix, UNSPECIFIED left out), each with its comment.
func reasonValues(fds *descriptorpb.FileDescriptorSet) ([]any, []string) {
	var values []any
	var descriptions []string
	for _, f := range fds.GetFile() {
		if f.GetPackage() != "lucius.v1" {
			continue
		}
		for ei, e := range f.GetEnumType() {
			if "lucius.v1."+e.GetName() != reasonEnum {
				continue
			}
			comments := comments(f, []int32{5, int32(ei), 2}) // enum_type = 5, value = 2
			for vi, v := range e.GetValue() {
				if v.GetNumber() == 0 {
					continue
				}
				name := strings.TrimPrefix(v.GetName(), reasonPrefix)
				values = append(values, name)
				line := "- `" + name + "`"
				if c := comments[int32(vi)]; c != "" {
					line += ": " + strings.Join(strings.Fields(c), " ")
				}
				descriptions = append(descriptions, line)
			}
		}
	}
	return values, descriptions
}

// comments maps the index of each child under prefix (a source path) to
// its leading comment.
func comments(f *descriptorpb.FileDescriptorProto, prefix []int32) map[int32]string {
	out := map[int32]string{}
	for _, loc := range f.GetSourceCodeInfo().GetLocation() {
		p := loc.GetPath()
		if len(p) == len(prefix)+1 && slices.Equal(p[:len(prefix)], prefix) {
			out[p[len(prefix)]] = strings.TrimSpace(loc.GetLeadingComments())
		}
	}
	return out
}

// streamingMethods are the operationIds (Service_Method, as protoc-gen-openapi
// names them) of server-streaming methods.
func streamingMethods(fds *descriptorpb.FileDescriptorSet) map[string]bool {
	out := map[string]bool{}
	for _, f := range fds.GetFile() {
		for _, s := range f.GetService() {
			for _, m := range s.GetMethod() {
				if m.GetServerStreaming() {
					out[s.GetName()+"_"+m.GetName()] = true
				}
			}
		}
	}
	return out
}

var fieldPathParam = regexp.MustCompile(`\{([a-z0-9_]+(?:\.[a-z0-9_]+)+)\}`)

// openAPIPath renames a template variable naming a nested field
// ({config.tenant_id}), which OpenAPI cannot name, to its last field
// ({tenant_id}): the URL the client builds is the same.
func openAPIPath(path string) string {
	return fieldPathParam.ReplaceAllStringFunc(path, func(v string) string {
		return "{" + pathParamName(strings.Trim(v, "{}")) + "}"
	})
}

func pathParamName(field string) string { return field[strings.LastIndex(field, ".")+1:] }

// tidy undoes protoc-gen-openapi's copy of the space after "//" on every
// comment line but the first.
func tidy(s string) string { return strings.ReplaceAll(s, "\n ", "\n") }

func tidyDescriptions(schemas map[string]any) {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && k == "description" {
					v[k] = tidy(s)
				} else {
					walk(c)
				}
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	for _, schema := range schemas {
		walk(schema)
	}
}

func ref(schema string) map[string]any { return map[string]any{"$ref": schemaRefRoot + schema} }

func jsonContent(schema any) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": schema}}
}

// object returns m[key] as an object, creating it when missing.
func object(m map[string]any, key string) map[string]any {
	if o, ok := m[key].(map[string]any); ok {
		return o
	}
	o := map[string]any{}
	m[key] = o
	return o
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
