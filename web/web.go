// Package web holds the dashboard's assets, embedded into the collector
// binary with go:embed so a deployment is one file. It serves files only;
// data comes from the collector's JSON API.
//
// dist/ is built from src/ by `make web` (npm ci && npm run build in this
// directory) and committed, so `go build` needs no Node.js.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed dist
var dist embed.FS

// Files is the built dashboard: index.html and assets/.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern above guarantees dist exists
	}
	return sub
}

// Handler serves the dashboard. Paths that name no file get index.html, so
// a reload on any page works; assets are cached, the page itself is not.
func Handler() http.Handler {
	files := Files()
	fileServer := http.FileServer(http.FS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name != "" {
			if _, err := fs.Stat(files, name); err == nil {
				if strings.HasPrefix(name, "assets/") {
					w.Header().Set("Cache-Control", "public, max-age=3600")
				}
				fileServer.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeFileFS(w, r, files, "index.html")
	})
}
