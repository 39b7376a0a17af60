// Package web holds the Ludus browser client: TypeScript sources under src/, built by
// `npm run build` into dist/, which is committed and embedded here so the ludus binary
// serves the page without npm at run time.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

// Dist is the built client: dist/index.html, dist/404.html, dist/app.js,
// dist/render-worker.js, dist/style.css, and the studio console dist/console.html
// with dist/console.js.
//
//go:embed all:dist
var Dist embed.FS

// contentTypes fixes the types of the files the build writes, independently of the
// host's mime tables (which may say application/javascript, or text/plain on Windows).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

type asset struct {
	body        []byte
	etag        string
	contentType string
}

// Handler serves the built client at "/": index.html for "/", the studio console
// (console.html) for "/console", and each file of dist by its name. Any other path
// is a 404 with dist/404.html, a page in the site's style
// with a link to the lobby. Only GET and HEAD are allowed.
//
// Every response carries "Cache-Control: no-cache" and a strong ETag of the content,
// so browsers revalidate (a cheap 304) and never run a stale app.js after an upgrade.
func Handler() http.Handler {
	assets := map[string]asset{}
	err := fs.WalkDir(Dist, "dist", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := Dist.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := contentTypes[path.Ext(name)]
		if ctype == "" {
			ctype = mime.TypeByExtension(path.Ext(name))
		}
		if ctype == "" {
			ctype = http.DetectContentType(body)
		}
		assets["/"+name[len("dist/"):]] = asset{
			body:        body,
			etag:        `"` + hex.EncodeToString(sum[:16]) + `"`,
			contentType: ctype,
		}
		return nil
	})
	if err != nil {
		panic("web: reading embedded dist: " + err.Error()) // cannot happen with embed.FS
	}
	page404 := assets["/404.html"].body
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path
		switch name {
		case "/":
			name = "/index.html"
		case "/console", "/console/":
			name = "/console.html"
		}
		a, ok := assets[name]
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !ok {
			notFound(w, r, page404)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		pageHeaders(h)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// notFound answers 404 with the site's "page not found" page (plain text if the
// build has none).
func notFound(w http.ResponseWriter, r *http.Request, page []byte) {
	if len(page) == 0 {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentTypes[".html"])
	h.Set("Cache-Control", "no-cache")
	pageHeaders(h)
	w.WriteHeader(http.StatusNotFound)
	if r.Method != http.MethodHead {
		_, _ = w.Write(page)
	}
}

// ContentSecurityPolicy is the policy of every page and asset: scripts,
// workers, styles and images from the site itself only (WebAssembly
// compiled by the page: 'wasm-unsafe-eval'), no plugins, no <base>, and no
// framing (the console holds API keys). Calls may go to other origins: the
// page times and joins the gateways of other regions.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; " +
	"style-src 'self'; img-src 'self' data: blob:; connect-src 'self' https: http:; object-src 'none'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// pageHeaders sets the headers every page and asset carries.
func pageHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
}
