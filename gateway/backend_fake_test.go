package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The gateway passes the key set through to the backend (BackendURL), and
// serves module builds it fetches from the backend's module store with the
// cluster token: to players of the owning tenant only, cached, with an ETag.
func TestFakeBackendKeySetAndModules(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(path, ticket string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ticket != "" {
			req.Header.Set("Authorization", "Bearer "+ticket)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := h2cClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}

	resp, body := get("/.well-known/jwks.json", "")
	if resp.StatusCode != http.StatusOK || string(body) != fakeJWKS {
		t.Fatalf("key set through the gateway: %s %q", resp.Status, body)
	}
	if n := c.backend.jwks.Load(); n != 1 {
		t.Fatalf("the backend served the key set %d times", n)
	}

	path := "/modules/" + fakeWasmBuild() + ".wasm"
	resp, body = get(path, ticketAlice)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, fakeWasm) {
		t.Fatalf("module for its tenant: %s %q", resp.Status, body)
	}
	if ct, etag := resp.Header.Get("Content-Type"), resp.Header.Get("ETag"); ct != "application/wasm" || etag != `"`+fakeWasmBuild()+`"` {
		t.Fatalf("module headers: content-type %q, etag %q", ct, etag)
	}
	resp, body = get(path, ticketBob)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, fakeWasm) {
		t.Fatalf("module again: %s", resp.Status)
	}
	if n := c.backend.gets.Load(); n != 1 {
		t.Fatalf("the module store was asked %d times for one build; the gateway caches it", n)
	}
	if resp, _ = get(path, ticketAlice, "If-None-Match", `"`+fakeWasmBuild()+`"`); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("module with its etag: %s", resp.Status)
	}
	if resp, _ = get(path, ticketEve); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("module of another tenant: %s", resp.Status)
	}
	if resp, _ = get(path, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("module without a ticket: %s", resp.Status)
	}
	if resp, _ = get(path, "forged"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("module with a forged ticket: %s", resp.Status)
	}
}

// TestFakeModuleDownloadsShareFetchesAndAreLimited: requests that miss the
// gateway's module cache at once share one fetch from the backend, and each
// account's misses are rate limited (429 with Retry-After), other accounts
// not held back.
func TestFakeModuleDownloadsShareFetchesAndAreLimited(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	gate := make(chan struct{})
	c.backend.getGate = gate
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(path, ticket string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+ticket)
		resp, err := h2cClient().Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	path := "/modules/" + fakeWasmBuild() + ".wasm"
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := get(path, ticketAlice); resp != nil && resp.StatusCode != http.StatusOK {
				t.Errorf("a download sharing a fetch: %s", resp.Status)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the five arrive while the fetch is held
	close(gate)
	wg.Wait()
	if n := c.backend.gets.Load(); n != 1 {
		t.Fatalf("the backend was asked %d times for five downloads at once, want 1", n)
	}
	// Misses (here: builds that do not exist) are limited per account:
	// five taken above, five more, then 429.
	missing := "/modules/" + strings.Repeat("ab", 32) + ".wasm"
	for i := range 5 {
		if resp := get(missing, ticketAlice); resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("miss %d: %v", i, resp)
		}
	}
	resp := get(missing, ticketAlice)
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("a miss past the limit: %v, want 429 with Retry-After: 2 (30 a minute)", resp)
	}
	if resp := get(missing, ticketBob); resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another account: %v", resp)
	}
	if resp := get(path, ticketAlice); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a cached build past the limit: %v, want it served", resp)
	}
}
