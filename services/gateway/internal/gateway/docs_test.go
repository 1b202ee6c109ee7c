package gateway

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/contract/openapi"
)

// The gateway serves the OpenAPI document and its viewer without a token,
// and every operation the document names (but the worker callbacks, which
// the orchestrator serves) is a route of this gateway that wants one.
func TestOpenAPIDocumentIsPublicAndNamesTheGatewaysAuthenticatedRoutes(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	for _, path := range []string{"/openapi.json", "/docs/"} {
		code, _, _ := f.restAs(t, "", "GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s without a token: %d", path, code)
		}
	}
	res, err := f.httpc.Get(f.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	served, _ := io.ReadAll(res.Body)
	if string(served) != string(openapi.JSON) {
		t.Fatal("/openapi.json is not contract/openapi/lucius.openapi.json")
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string         `json:"operationId"`
			Responses   map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(served, &doc); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	checked := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if strings.HasPrefix(op.OperationID, "CallbackService_") {
				continue // served by the orchestrator
			}
			checked++
			url := param.ReplaceAllString(path, "1") // numeric ids parse; string ones take it too
			var body any
			if method != "get" && method != "delete" {
				body = map[string]any{}
			}
			code, _, out := f.restAs(t, "", strings.ToUpper(method), url, body)
			if code != http.StatusUnauthorized {
				t.Errorf("%s %s (%s) without a token: %d %v, want 401", method, url, op.OperationID, code, out)
			}
			if _, ok := op.Responses["401"]; !ok {
				t.Errorf("%s does not document 401", op.OperationID)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d operations checked", checked)
	}
	if _, ok := doc.Paths["/v1/commands"]["post"].Responses["202"]; !ok {
		t.Errorf("Submit's responses %v lack the 202 it answers", slices.Sorted(maps.Keys(doc.Paths["/v1/commands"]["post"].Responses)))
	}
}
