package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// nestedPayload is a payload (with the prompt_set SIS needs) nesting depth
// levels deep, the payload itself being the first: objects, or lists below
// the top when lists is set.
func nestedPayload(depth int, lists bool) map[string]any {
	var v any = "leaf"
	for range depth - 1 {
		if lists {
			v = []any{v}
		} else {
			v = map[string]any{"a": v}
		}
	}
	return map[string]any{"prompt_set": []any{"summarize"}, "deep": v}
}

// emptyNested is depth levels of objects, the innermost empty.
func emptyNested(depth int) map[string]any {
	v := map[string]any{}
	for range depth - 1 {
		v = map[string]any{"a": v}
	}
	return v
}

// jsonDepth is how deeply v nests objects and lists (a scalar: 0), computed
// on the map form, independently of checkPayload.
func jsonDepth(v any) int {
	inner := 0
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			inner = max(inner, jsonDepth(x))
		}
	case []any:
		for _, x := range v {
			inner = max(inner, jsonDepth(x))
		}
	default:
		return 0
	}
	return inner + 1
}

func TestCheckPayloadBoundsSizeAndDepth(t *testing.T) {
	t.Parallel()
	limits := PayloadLimits{MaxBytes: 4096, MaxDepth: 8}
	tests := []struct {
		name    string
		payload map[string]any
		want    string // a word of the violation; "" when accepted
	}{
		{"small and flat", map[string]any{"a": 1.0, "b": "x"}, ""},
		{"empty", map[string]any{}, ""},
		{"objects at the depth limit", nestedPayload(8, false), ""},
		{"objects past the depth limit", nestedPayload(9, false), "levels deep"},
		{"lists at the depth limit", nestedPayload(8, true), ""},
		{"lists past the depth limit", nestedPayload(9, true), "levels deep"},
		{"empty objects count", emptyNested(9), "levels deep"},
		{"empty lists count", map[string]any{"a": nestedPayload(7, false), "b": []any{[]any{[]any{[]any{[]any{[]any{[]any{[]any{}}}}}}}}}, "levels deep"},
		{"far past the depth limit", nestedPayload(100_000, false), "levels deep"},
		{"at the size limit", map[string]any{"s": strings.Repeat("x", 4000)}, ""},
		{"past the size limit", map[string]any{"s": strings.Repeat("x", 5000)}, "bytes encoded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := structpb.NewStruct(tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			vs := checkPayload(p, limits)
			if tt.want == "" {
				if vs != nil {
					t.Fatalf("refused: %+v", vs)
				}
				return
			}
			said := false
			for _, v := range vs {
				if v.Field != "command.payload" || v.Reason != luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD {
					t.Fatalf("violation %+v", v)
				}
				said = said || strings.Contains(v.Description, tt.want)
			}
			if !said {
				t.Fatalf("violations %+v, want one saying %q", vs, tt.want)
			}
		})
	}
}

func TestPageSizeDefaultsAndClampsToTheContractsBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		req  pagedRequest
		def  int
		want int
	}{
		{&luciusv1.ListJobsRequest{}, 50, 50},
		{&luciusv1.ListJobsRequest{PageSize: 7}, 50, 7},
		{&luciusv1.ListJobsRequest{PageSize: 500}, 50, 500},
		{&luciusv1.ListJobsRequest{PageSize: 1_000_000}, 50, 500},
		{&luciusv1.ListJobsRequest{PageSize: -3}, 50, 50},
		{&luciusv1.ListJobStepsRequest{PageSize: 1_000_000}, 1000, 5000},
		{&luciusv1.ListJobEventsRequest{PageSize: 1_000_000}, 200, 1000},
	}
	for _, tt := range tests {
		if got := pageSize(tt.req, tt.def); got != tt.want {
			t.Errorf("pageSize(%T{page_size: %d}, %d) = %d, want %d", tt.req, tt.req.GetPageSize(), tt.def, got, tt.want)
		}
	}
}

// Every List request in the contract bounds its page_size, so the handlers'
// clamp is the contract's bound, never the fallback.
func TestEveryListRequestBoundsItsPageSize(t *testing.T) {
	t.Parallel()
	lists := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("lucius.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Messages().Len() {
			md := fd.Messages().Get(i)
			name := string(md.Name())
			if !strings.HasPrefix(name, "List") || !strings.HasSuffix(name, "Request") {
				continue
			}
			lists++
			if md.Fields().ByName("page_size") == nil {
				t.Errorf("%s has no page_size", name)
				continue
			}
			if _, ok := pageSizeBound(md); !ok {
				t.Errorf("%s.page_size has no lte bound in the contract", name)
			}
		}
		return true
	})
	if lists < 8 {
		t.Fatalf("found %d List requests in lucius.v1, want at least 8", lists)
	}
}

// FuzzSubmitRequest runs a REST body through what the gateway does before
// storing anything: JSON decoding with the REST depth limit, protovalidate,
// the payload bounds and admission. Never a panic; protovalidate fails only
// with violations; the payload bounds hold exactly when the payload is within
// them; admission keeps FuzzAdmit's contract.
func FuzzSubmitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"command":{"tenant_id":"acme","request_type":"OCR_EMBEDDING_SIS","schema_version":"1","input_ref":"file:///data/in.txt",` +
			`"output_ref":"file:///data/out.json","payload":{"prompt_set":["summarize"]}}}`,
		`{"command":{"tenant_id":" Acme ","request_type":"OCR_EMBEDDING_SIS","schema_version":"1.3","mode":"MODE_BURST","doc_id":"d1",` +
			`"input_ref":"az://acct/bronze/in.pdf","output_ref":"https://h/out","payload":{"prompt_set":["a","b"],"chunk_size":100}}}`,
		`{"command":{"tenant_id":"acme","payload":{"a":{"b":{"c":[[[[{"d":null}]]]]}}}}}`,
		`{"command":{"tenant_id":"..","request_type":"x","schema_version":"2","input_ref":"file:///etc/passwd","output_ref":"",` +
			`"callback_url":"http://169.254.169.254/","payload":{}}}`,
		`{}`,
		`{"command":{"payload":` + strings.Repeat(`{"a":`, 80) + `1` + strings.Repeat(`}`, 80) + `}}`,
	} {
		f.Add([]byte(seed))
	}
	validator, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	reg := builtinWorkflows(f)
	limits := PayloadLimits{MaxBytes: 2048, MaxDepth: 6}
	decode := protojson.UnmarshalOptions{RecursionLimit: server.DefaultMaxJSONDepth}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &luciusv1.SubmitRequest{}
		if decode.Unmarshal(body, req) != nil {
			return
		}
		if err := validator.Validate(req); err != nil {
			var verr *protovalidate.ValidationError
			if !errors.As(err, &verr) || len(verr.Violations) == 0 {
				t.Fatalf("protovalidate failed without violations: %v", err)
			}
			if st := server.ValidationStatus(verr); st.Code() != codes.InvalidArgument {
				t.Fatalf("validation status %v", st)
			}
			return
		}
		cmd := req.GetCommand()
		vs := checkPayload(cmd.GetPayload(), limits)
		within := proto.Size(cmd.GetPayload()) <= limits.MaxBytes && jsonDepth(cmd.GetPayload().AsMap()) <= limits.MaxDepth
		if within != (len(vs) == 0) {
			t.Fatalf("payload of %d bytes, %d deep: violations %+v", proto.Size(cmd.GetPayload()),
				jsonDepth(cmd.GetPayload().AsMap()), vs)
		}
		if !within {
			return
		}
		a, avs, err := admit(cmd, reg, testConfig, testPolicy)
		if err != nil {
			t.Fatal(err)
		}
		if (a == nil) == (len(avs) == 0) {
			t.Fatalf("admit returned %v and %d violations", a, len(avs))
		}
		for _, v := range avs {
			if !strings.HasPrefix(v.Field, "command.") || v.Reason == luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED || v.Description == "" {
				t.Fatalf("bad violation %+v", v)
			}
		}
		if a != nil && (!hex64.MatchString(a.requestKey) || a.tenant == "") {
			t.Fatalf("admitted %q for tenant %q", a.requestKey, a.tenant)
		}
	})
}

func TestGatewayBoundsRequestsOverRESTAndGRPC(t *testing.T) {
	t.Parallel()
	f := startGateway(t)

	t.Run("a 10 MB body answers 413", func(t *testing.T) {
		body := validBody("")
		body["payload"] = map[string]any{"prompt_set": []any{"summarize"}, "blob": strings.Repeat("x", 10<<20)}
		raw, _ := json.Marshal(body)
		start := time.Now()
		resp, err := f.httpc.Post(f.base+"/v1/commands", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		t.Logf("answered %d in %s", resp.StatusCode, time.Since(start))
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(out), server.Reason(luciusv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE)) {
			t.Fatalf("status %d: %.300s", resp.StatusCode, out)
		}
	})

	t.Run("payloads over the bounds are refused on both APIs", func(t *testing.T) {
		for name, payload := range map[string]map[string]any{
			"too deep":  nestedPayload(DefaultMaxPayloadDepth+1, false),
			"too large": {"prompt_set": []any{"summarize"}, "blob": strings.Repeat("x", DefaultMaxPayloadBytes)},
		} {
			before := f.count(t, "requests")
			body := validBody("")
			body["payload"] = payload
			code, resp := f.rest(t, "POST", "/v1/commands", body)
			if code != http.StatusBadRequest || !hasFieldViolation(resp, "command.payload") {
				t.Fatalf("%s over REST: %d %.300v", name, code, resp)
			}
			p, err := structpb.NewStruct(payload)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.cmds.Submit(f.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
				RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: "file:///data/in.txt",
				OutputRef: "file:///data/out.json", Payload: p}})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !grpcHasFieldViolation(st, "command.payload") {
				t.Fatalf("%s over gRPC: %v", name, err)
			}
			if n := f.count(t, "requests"); n != before {
				t.Fatalf("%s: a refused command wrote %d requests", name, n-before)
			}
		}
	})

	t.Run("a page larger than gRPC's default 4 MiB answers 200 over REST", func(t *testing.T) {
		blob := strings.Repeat("x", DefaultMaxPayloadBytes-1024)
		for i := range 20 {
			body := validBody(fmt.Sprintf("big-%d", i))
			body["payload"] = map[string]any{"prompt_set": []any{"summarize"}, "blob": blob}
			if code, resp := f.rest(t, "POST", "/v1/commands", body); code != http.StatusAccepted {
				t.Fatalf("submit %d: %d %.300v", i, code, resp)
			}
		}
		req, _ := http.NewRequest(http.MethodGet, f.base+"/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+f.operator)
		resp, err := f.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || len(out) < 4<<20 {
			t.Fatalf("GET /v1/jobs: %d, %d bytes: %.300s", resp.StatusCode, len(out), out)
		}
	})
}
