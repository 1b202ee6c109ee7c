package gateway

import (
	"net/http"
	"testing"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

const reverserYAML = `workflow_id: reverse_lines
version: 1
nodes:
  START: {type: start, next: reverse}
  reverse: {type: task, handler: REVERSE, next: END}
  END: {type: end}
`

// A worker that announces a new handler makes it usable at once: a
// workflow naming it registers and takes commands, with no restart. A
// worker may announce only the services its identity serves and no handler
// another service runs; operators list the workers.
func TestWorkersAnnounceTheirHandlers(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	if code, body := f.rest(t, "POST", "/v1/workflows", map[string]any{"source": reverserYAML}); code != http.StatusBadRequest {
		t.Fatalf("a workflow naming an unknown handler: %d %v", code, body)
	}
	worker := f.issuer.Token(t, authtest.Worker("reverser"))
	announce := map[string]any{"service": "reverser", "instance_id": "reverser-0", "version": "0.1.0",
		"handlers": []any{map[string]any{"name": "REVERSE", "version": "1", "description": "reverses lines"}}}
	code, _, body := f.restAs(t, worker, "POST", "/v1/workers:register", announce)
	if code != http.StatusOK || body["heartbeat_interval"] != "30s" {
		t.Fatalf("announce: %d %v", code, body)
	}
	if code, body := f.rest(t, "POST", "/v1/workflows", map[string]any{"source": reverserYAML}); code != http.StatusOK {
		t.Fatalf("a workflow naming the announced handler: %d %v", code, body)
	}
	cmd := validBody("rev")
	cmd["request_type"] = "reverse_lines"
	cmd["payload"] = map[string]any{}
	if code, body := f.rest(t, "POST", "/v1/commands", cmd); code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, body)
	}

	refused := []struct {
		name   string
		token  string
		body   map[string]any
		code   int
		reason string
	}{
		{"another service", worker, map[string]any{"service": "ocr", "instance_id": "x",
			"handlers": []any{map[string]any{"name": "REVERSE"}}}, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_SERVICE_NOT_SERVED)},
		{"a handler another service runs", f.issuer.Token(t, authtest.Worker("thief")), map[string]any{"service": "thief",
			"instance_id": "x", "handlers": []any{map[string]any{"name": "OCR"}}}, http.StatusConflict, server.Reason(luciusv1.ErrorReason_ERROR_REASON_HANDLER_OWNED_BY_ANOTHER_SERVICE)},
		{"no handlers", worker, map[string]any{"service": "reverser", "instance_id": "x"}, http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
		{"a handler name with a space", worker, map[string]any{"service": "reverser", "instance_id": "x",
			"handlers": []any{map[string]any{"name": "RE VERSE"}}}, http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
		{"a partner", f.issuer.Token(t, authtest.Partner("acme")), announce, http.StatusForbidden, "PERMISSION_DENIED"},
	}
	for _, tt := range refused {
		if code, _, body := f.restAs(t, tt.token, "POST", "/v1/workers:register", tt.body); code != tt.code || reasonOf(body) != tt.reason {
			t.Fatalf("%s: %d %v, want %d %s", tt.name, code, body, tt.code, tt.reason)
		}
	}

	code, list := f.rest(t, "GET", "/v1/workers?service=reverser", nil)
	workers, _ := list["workers"].([]any)
	if code != http.StatusOK || len(workers) != 1 {
		t.Fatalf("list: %d %v", code, list)
	}
	w := workers[0].(map[string]any)
	instances, handlers := w["instances"].([]any), w["handlers"].([]any)
	if len(instances) != 1 || instances[0].(map[string]any)["live"] != true || instances[0].(map[string]any)["version"] != "0.1.0" ||
		len(handlers) != 1 || handlers[0].(map[string]any)["name"] != "REVERSE" {
		t.Fatalf("the reverser's workers: %v", w)
	}
	if code, _, _ := f.restAs(t, f.issuer.Token(t, authtest.Partner("acme")), "GET", "/v1/workers", nil); code != http.StatusForbidden {
		t.Fatalf("a partner listing workers: %d", code)
	}
}
