package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/workflow"
)

const twoStepYAML = `workflow_id: ocr_then_sis
name: OCR then prompts
version: 1
inputs:
  prompt_set: {type: list, items: string, required: true}
nodes:
  START: {type: start, next: ocr}
  ocr: {type: task, handler: OCR, next: sis}
  sis: {type: task, handler: SIS, params: {prompt_set: "{{ inputs.prompt_set }}"}, next: END}
  END: {type: end}
`

func TestWorkflowServiceOverREST(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	code, body := f.rest(t, "POST", "/v1/workflows", map[string]any{"source": twoStepYAML})
	if code != http.StatusOK || body["created"] != true {
		t.Fatalf("register: %d %v", code, body)
	}
	wf := body["workflow"].(map[string]any)
	if wf["workflow_id"] != "ocr_then_sis" || wf["version"] != 1.0 || len(wf["nodes"].([]any)) != 4 || wf["sha256"] == "" {
		t.Fatalf("registered workflow %v", wf)
	}
	if code, body = f.rest(t, "POST", "/v1/workflows", map[string]any{"source": twoStepYAML}); code != http.StatusOK || body["created"] == true {
		t.Fatalf("re-register the same content: %d %v", code, body)
	}
	changed := strings.Replace(twoStepYAML, "name: OCR then prompts", "name: changed", 1)
	if code, body = f.rest(t, "POST", "/v1/workflows", map[string]any{"source": changed}); code != http.StatusConflict || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_VERSION_EXISTS) {
		t.Fatalf("same version, other content: %d %v", code, body)
	}
	// A new request type runs as soon as it is registered: the gateway accepts it.
	cmd := validBody("")
	cmd["request_type"] = "ocr_then_sis"
	if code, body = f.rest(t, "POST", "/v1/commands", cmd); code != http.StatusAccepted {
		t.Fatalf("submit to the new workflow: %d %v", code, body)
	}
	broken := strings.Replace(twoStepYAML, "handler: SIS", "handler: TRANSLATE", 1)
	code, body = f.rest(t, "POST", "/v1/workflows", map[string]any{"source": strings.Replace(broken, "version: 1", "version: 2", 1)})
	if code != http.StatusBadRequest || !hasFieldViolation(body, "source") || !strings.Contains(body["message"].(string), "9:") ||
		!strings.Contains(body["message"].(string), "node sis: unknown handler \"TRANSLATE\"") {
		t.Fatalf("invalid definition: %d %v", code, body)
	}
	code, body = f.rest(t, "POST", "/v1/workflows:validate", map[string]any{"source": broken})
	if code != http.StatusOK || body["valid"] != false || len(body["errors"].([]any)) != 1 {
		t.Fatalf("validate: %d %v", code, body)
	}
	if code, body = f.rest(t, "POST", "/v1/workflows:validate", map[string]any{"source": twoStepYAML}); code != http.StatusOK || body["valid"] != true {
		t.Fatalf("validate a good one: %d %v", code, body)
	}
	if code, body = f.rest(t, "GET", "/v1/workflows/raster_processing", nil); code != http.StatusOK ||
		body["workflow"].(map[string]any)["name"] != "Raster Processing Pipeline" {
		t.Fatalf("get built-in: %d %v", code, body)
	}
	if code, body = f.rest(t, "GET", "/v1/workflows/nope", nil); code != http.StatusNotFound {
		t.Fatalf("get unknown: %d %v", code, body)
	}
	seen := 0
	token := ""
	for range 10 {
		code, body = f.rest(t, "GET", "/v1/workflows?page_size=3&page_token="+token, nil)
		if code != http.StatusOK {
			t.Fatalf("list: %d %v", code, body)
		}
		seen += len(body["workflows"].([]any))
		if token, _ = body["next_page_token"].(string); token == "" {
			break
		}
	}
	if seen != 9 { // eight built-in workflows and the one registered
		t.Fatalf("listed %d workflows, want 9", seen)
	}
}

// chainYAML is an n-node workflow: START, n-2 OCR tasks in a row, END.
func chainYAML(n int) string {
	var b strings.Builder
	b.WriteString("workflow_id: long_chain\nversion: 1\nnodes:\n  START: {type: start, next: t0}\n")
	for i := range n - 2 {
		next := fmt.Sprintf("t%d", i+1)
		if i == n-3 {
			next = "END"
		}
		fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, next: %s}\n", i, next)
	}
	b.WriteString("  END: {type: end}\n")
	return b.String()
}

func TestRegisterWorkflowRefusesOneOverTheNodeLimit(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	tooLarge := chainYAML(workflow.DefaultMaxNodes + 1)
	code, body := f.rest(t, "POST", "/v1/workflows", map[string]any{"source": tooLarge})
	msg, _ := body["message"].(string)
	if code != http.StatusBadRequest || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_TOO_LARGE) || !hasFieldViolation(body, "source") ||
		!strings.Contains(msg, "max_nodes") || !strings.Contains(msg, "1001 nodes") {
		t.Fatalf("REST register of %d nodes: %d %v", workflow.DefaultMaxNodes+1, code, body)
	}
	_, err := luciusv1.NewWorkflowServiceClient(f.conn).RegisterWorkflow(f.ctx, &luciusv1.RegisterWorkflowRequest{Source: tooLarge})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "max_nodes") {
		t.Fatalf("gRPC register of %d nodes: %v", workflow.DefaultMaxNodes+1, err)
	}
	code, body = f.rest(t, "POST", "/v1/workflows:validate", map[string]any{"source": tooLarge})
	if errs, _ := body["errors"].([]any); code != http.StatusOK || body["valid"] == true || len(errs) != 1 ||
		!strings.Contains(errs[0].(string), "max_nodes") {
		t.Fatalf("validate %d nodes: %d %v", workflow.DefaultMaxNodes+1, code, body)
	}
	if code, body = f.rest(t, "POST", "/v1/workflows", map[string]any{"source": chainYAML(workflow.DefaultMaxNodes)}); code != http.StatusOK {
		t.Fatalf("register %d nodes, the limit: %d %v", workflow.DefaultMaxNodes, code, body)
	}
}
