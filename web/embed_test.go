package web

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	cases := []struct {
		path, ctype, body string
	}{
		{"/", "text/html; charset=utf-8", "Play as guest"},
		{"/index.html", "text/html; charset=utf-8", `src="app.js"`},
		{"/app.js", "text/javascript; charset=utf-8", "indexed8"},
		{"/style.css", "text/css; charset=utf-8", "image-rendering: pixelated"},
		{"/console", "text/html; charset=utf-8", `src="/console.js"`},
		{"/console/", "text/html; charset=utf-8", "Ludus console"},
		{"/console.js", "text/javascript; charset=utf-8", "ludus.console"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d", c.path, rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.ctype)
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", c.path, got)
		}
		checkPageHeaders(t, "GET "+c.path, rec.Header())
		if !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("GET %s: body lacks %q", c.path, c.body)
		}

		etag := rec.Header().Get("ETag")
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		req.Header.Set("If-None-Match", etag)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: status %d, want 304", c.path, etag, rec.Code)
		}
	}

	for _, p := range []string{"/nope", "/dist/app.js", "/../go.mod", "/games/42/x", "/console/x", "/consoles"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", p, rec.Code)
		}
		// The site's own page: its style sheet (by an absolute path, as the
		// unknown path may be deep) and a link home.
		body := rec.Body.String()
		for _, want := range []string{"Page not found", `href="/style.css"`, `href="/"`} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s: 404 page lacks %q", p, want)
			}
		}
		if got := rec.Header().Get("Content-Type"); got != "text/html; charset=utf-8" {
			t.Errorf("GET %s: 404 Content-Type %q", p, got)
		}
		checkPageHeaders(t, "GET "+p, rec.Header())
	}
	rec404 := httptest.NewRecorder()
	h.ServeHTTP(rec404, httptest.NewRequest(http.MethodHead, "/nope", nil))
	if rec404.Code != http.StatusNotFound || rec404.Body.Len() != 0 {
		t.Errorf("HEAD /nope: status %d with %d bytes, want 404 and no body", rec404.Code, rec404.Body.Len())
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: status %d, want 405", rec.Code)
	}
}

// TestBundleBudget keeps every bundle within its gzip budget (budget.json, which
// build.mjs checks too): the console is a bundle of its own so that the player
// page does not grow with it, and neither may grow by accident.
func TestBundleBudget(t *testing.T) {
	raw, err := os.ReadFile("budget.json")
	if err != nil {
		t.Fatal(err)
	}
	var budget struct {
		GzipBytes map[string]int `json:"gzipBytes"`
	}
	if err := json.Unmarshal(raw, &budget); err != nil {
		t.Fatal(err)
	}
	for _, js := range []string{"app.js", "console.js", "render-worker.js"} {
		if _, ok := budget.GzipBytes[js]; !ok {
			t.Errorf("budget.json has no budget for %s", js)
		}
	}
	for file, limit := range budget.GzipBytes {
		body, err := Dist.ReadFile("dist/" + file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		t.Logf("%-18s %7d B, gzip %6d B of %d", file, len(body), buf.Len(), limit)
		// Go's deflate and zlib's differ by a few percent; allow 3%.
		if buf.Len() > limit+limit*3/100 {
			t.Errorf("%s is %d bytes gzipped, over its budget of %d (web/budget.json)", file, buf.Len(), limit)
		}
	}
}

// checkPageHeaders: every page and asset forbids framing and plugins and
// loads scripts from the site only (the browser flows run under the policy,
// and a page error from it fails them).
func checkPageHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self' 'wasm-unsafe-eval'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", what, csp, want)
		}
	}
	if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" {
		t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q, Referrer-Policy %q", what, h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
	}
}
