package server

import "net/http"

// ContentSecurityPolicy is the policy of every page Lucius serves to a
// browser (the console, the API viewer): the page's own files and calls to
// its own origin, nothing inline, no other origin, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// BrowserHeaders sets the headers every response to a browser carries:
// ContentSecurityPolicy, no MIME sniffing, no framing, no Referer (a console
// login URL's ticket never leaves in one), and cacheControl ("no-store" for
// pages that show data, "no-cache" for public files that may change).
func BrowserHeaders(next http.Handler, cacheControl string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", cacheControl)
		next.ServeHTTP(w, r)
	})
}
