// Package web serves the dashboard: the single-page app built from this
// directory (npm run build → dist/) and embedded in the binary. Every path
// that is not a built file answers index.html, so the app's URLs survive a
// reload. Without a build (go build on a machine without Node) it serves a
// page that says how to build the UI.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// Built reports whether the embedded dist holds a built app.
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}

// securityHeaders are set on every dashboard response. The app loads only
// its own scripts; connect-src 'self' covers the API and the gateway's
// WebSocket on this origin. Inline styles are allowed for the terminal
// (xterm.js writes style elements); inline and foreign scripts are not.
// Frames come from this origin and the frame origins Handler is given
// (Nango's Connect UI).
func securityHeaders(frameOrigins []string) map[string]string {
	frames := "'self'"
	for _, raw := range frameOrigins {
		if u, err := url.Parse(raw); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			frames += " " + u.Scheme + "://" + u.Host
		}
	}
	return map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: https:; " +
			"connect-src 'self'; font-src 'self' data:; frame-src " + frames + "; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "same-origin",
		"X-Frame-Options":        "DENY",
	}
}

// Handler serves the dashboard (GET and HEAD only); frameOrigins are the
// URLs (their origins count) of the third-party pages it may show in a
// frame.
func Handler(frameOrigins ...string) http.Handler {
	headers := securityHeaders(frameOrigins)
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees dist exists
	}
	files := http.FileServerFS(sub)
	built := Built()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !built {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(notBuilt))
			return
		}
		p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if p != "" && p != "index.html" && p != ".gitkeep" {
			if st, err := fs.Stat(sub, p); err == nil && !st.IsDir() {
				if strings.HasPrefix(p, "assets/") {
					// Vite names assets by content hash.
					w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				files.ServeHTTP(w, r)
				return
			}
			if strings.HasPrefix(p, "assets/") {
				http.NotFound(w, r)
				return
			}
		}
		// A screen of the app: index.html, never stored (it names the
		// current assets). no-store also keeps the page out of the
		// back/forward cache: a live dashboard is loaded afresh, not
		// thawed with the polls, requests, lock and channel it had when
		// it was left (Chromium could hang the next page's renderer).
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, sub, "index.html")
	})
}

const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Proliferate</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; padding: 0 1rem">
<h1>The dashboard is not built</h1>
<p>This binary was built without the web UI. Build it with <code>make web</code>
(needs Node.js and npm; <code>make run</code> does it for you), then rebuild the binary.</p>
<p>The REST API is at <a href="/api/v1/openapi.json">/api/v1</a>.</p>
</body></html>
`
