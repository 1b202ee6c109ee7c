package docs

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/contract/openapi"
)

// next stands for the authenticated REST surface behind the docs.
var next = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusUnauthorized)
})

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestDocumentAndViewerArePublicAndEverythingElseGoesBehind(t *testing.T) {
	t.Parallel()
	h := Front(next)
	for _, tc := range []struct {
		method, path string
		code         int
		contentType  string
	}{
		{"GET", "/openapi.json", http.StatusOK, "application/json"},
		{"GET", "/docs", http.StatusMovedPermanently, ""},
		{"GET", "/docs/", http.StatusOK, "text/html; charset=utf-8"},
		{"GET", "/docs/docs.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"GET", "/docs/swagger-ui/swagger-ui-bundle.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"GET", "/docs/swagger-ui/swagger-ui.css", http.StatusOK, "text/css; charset=utf-8"},
		{"GET", "/docs/nothing-here.js", http.StatusNotFound, ""},
		{"POST", "/openapi.json", http.StatusUnauthorized, ""},
		{"GET", "/v1/jobs", http.StatusUnauthorized, ""},
		{"GET", "/openapi.yaml", http.StatusUnauthorized, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			res := get(t, h, tc.method, tc.path)
			if res.StatusCode != tc.code {
				t.Fatalf("%d, want %d", res.StatusCode, tc.code)
			}
			if tc.contentType != "" && res.Header.Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type %q, want %q", res.Header.Get("Content-Type"), tc.contentType)
			}
			if tc.code == http.StatusOK && res.Header.Get("Content-Security-Policy") != server.ContentSecurityPolicy {
				t.Errorf("Content-Security-Policy %q", res.Header.Get("Content-Security-Policy"))
			}
		})
	}
	if loc := get(t, h, "GET", "/docs").Header.Get("Location"); loc != "/docs/" {
		t.Errorf("/docs redirects to %q", loc)
	}
}

func TestDocumentIsTheContracts(t *testing.T) {
	t.Parallel()
	body, _ := io.ReadAll(get(t, Front(next), "GET", "/openapi.json").Body)
	if len(openapi.JSON) == 0 || !bytes.Equal(body, openapi.JSON) {
		t.Fatalf("served %d bytes, not contract/openapi/lucius.openapi.json (%d bytes)", len(body), len(openapi.JSON))
	}
}

// The viewer loads only files it serves itself (the CSP allows nothing
// else), and none of them is missing.
func TestViewerLoadsOnlyItsOwnFiles(t *testing.T) {
	t.Parallel()
	h := Front(next)
	page, _ := io.ReadAll(get(t, h, "GET", "/docs/").Body)
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 4 {
		t.Fatalf("the page names %d files: %s", len(refs), page)
	}
	for _, m := range refs {
		ref := m[1]
		if !strings.HasPrefix(ref, ViewerPath+"/") {
			t.Errorf("%s is not one of the viewer's files", ref)
			continue
		}
		if res := get(t, h, "GET", ref); res.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", ref, res.StatusCode)
		}
	}
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "style=") {
		t.Error("the page has inline script or style, which the CSP refuses")
	}
	script, _ := io.ReadAll(get(t, h, "GET", "/docs/docs.js").Body)
	if !strings.Contains(string(script), `url: "`+DocumentPath+`"`) {
		t.Errorf("docs.js does not load %s", DocumentPath)
	}
}
