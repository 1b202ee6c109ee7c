// Package docs serves the contract's OpenAPI document at /openapi.json and
// Swagger UI on it at /docs. Both are public: the document describes the
// API, never its data, and every call the viewer makes still needs a bearer
// token (its Authorize button). The viewer is swagger-ui-dist, pinned in
// tools/swaggerui and committed under web/swagger-ui (make swaggerui-files;
// make check-swaggerui compares it with the pinned package), embedded, so it
// works offline and under a Content-Security-Policy that allows only 'self'.
package docs

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/contract/openapi"
)

//go:embed web
var webFiles embed.FS

// Paths of the document and the viewer.
const (
	DocumentPath = "/openapi.json"
	ViewerPath   = "/docs"
)

// Front serves /openapi.json and /docs without authentication and hands
// every other request to next (see server.Endpoint.Front).
func Front(next http.Handler) http.Handler {
	web, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree always has web/
	}
	files := http.StripPrefix(ViewerPath+"/", http.FileServerFS(web))
	mux := http.NewServeMux()
	mux.Handle("GET "+DocumentPath, secured(http.HandlerFunc(document)))
	mux.Handle("GET "+ViewerPath, http.RedirectHandler(ViewerPath+"/", http.StatusMovedPermanently))
	mux.Handle("GET "+ViewerPath+"/", secured(files))
	mux.Handle("/", next)
	return mux
}

func document(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*") // a public document other tools (editors, generators) may fetch
	_, _ = w.Write(openapi.JSON)
}

// secured sets the browser headers on these public routes; their files may
// change with a release, so a browser revalidates them.
func secured(next http.Handler) http.Handler { return server.BrowserHeaders(next, "no-cache") }
