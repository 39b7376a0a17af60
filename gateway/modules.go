package gateway

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
)

// Serving modules to players: a client that asks for snapshots renders them
// with the game's own module (its ludus_render), so it fetches the module's
// bytes by build id from GET /modules/{build_id}.wasm, with its session ticket.
// A build id is the SHA-256 of the bytes, so the response is immutable: the
// ETag is the build id and browsers may keep it for a year. The ticket's tenant
// must own the build (another tenant's build is simply not found), and the
// gateway checks the bytes' hash before it sends them; the client checks it
// again before running them.

// modulePathPrefix is where modules are served.
const modulePathPrefix = "/modules/"

// moduleCacheBytes bounds the modules the gateway keeps in memory, so a
// thousand players opening a game fetch its module from the backend once.
const moduleCacheBytes = 128 << 20

// Module downloads that miss the gateway's cache, per account: 30 a minute,
// 10 at once.
const (
	moduleDownloadsPerMinute float64 = 30 // float: divided by 60 for a rate a second
	moduleDownloadBurst              = 10
)

// maxServedModuleBytes is the largest module served (the backend's upload
// limit is 32 MiB).
const maxServedModuleBytes = 32 << 20

// moduleCache is a small LRU of module bytes by tenant and build.
type moduleCache struct {
	mu    sync.Mutex
	bytes int
	order *list.List // of *cachedModule, most recent first
	byKey map[string]*list.Element
}

type cachedModule struct {
	key  string
	wasm []byte
}

func newModuleCache() *moduleCache {
	return &moduleCache{order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *moduleCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedModule).wasm, true
}

func (c *moduleCache) put(key string, wasm []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok || len(wasm) > moduleCacheBytes {
		return
	}
	c.byKey[key] = c.order.PushFront(&cachedModule{key: key, wasm: wasm})
	c.bytes += len(wasm)
	for c.bytes > moduleCacheBytes {
		last := c.order.Back()
		m := last.Value.(*cachedModule)
		c.order.Remove(last)
		delete(c.byKey, m.key)
		c.bytes -= len(m.wasm)
	}
}

// validBuildID reports whether s is a lowercase hex SHA-256.
func validBuildID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// serveModule answers GET /modules/{build_id}.wasm.
func (g *Gateway) serveModule(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, modulePathPrefix)
	build, ok := strings.CutSuffix(name, ".wasm")
	if !ok || !validBuildID(build) {
		http.Error(w, "not found: modules are served as /modules/{build_id}.wasm, the build id being the module's lowercase hex SHA-256", http.StatusNotFound)
		return
	}
	ticket, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || ticket == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ludus"`)
		http.Error(w, "unauthenticated: send your session ticket as Authorization: Bearer <ticket>", http.StatusUnauthorized)
		return
	}
	claims, err := g.cfg.Verifier.Verify(r.Context(), ticket)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ludus", error="invalid_token"`)
		http.Error(w, "unauthenticated: the session ticket is invalid or expired; log in again", http.StatusUnauthorized)
		return
	}
	key := claims.TenantID + "/" + build
	wasm, cached := g.moduleBytes.get(key)
	if !cached {
		// A miss fetches up to 32 MiB from the backend: misses of one build
		// share one fetch, and each account's misses are rate limited (a
		// player fetches a build once a game; browsers keep it).
		if err := g.fetches.allow(claims.AccountID); err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				w.Header().Set("Retry-After", ce.Meta().Get("Retry-After"))
			}
			http.Error(w, "too many module downloads: "+ce.Message(), http.StatusTooManyRequests)
			return
		}
		v, err, _ := g.moduleFetch.Do(key, func() (any, error) { return g.fetchModule(claims.TenantID, build) })
		if err != nil {
			var fe *fetchError
			if errors.As(err, &fe) {
				http.Error(w, fe.msg, fe.status)
				return
			}
			http.Error(w, "the module store is unavailable; retry in a moment", http.StatusServiceUnavailable)
			return
		}
		wasm = v.([]byte)
	}
	etag := `"` + build + `"`
	h := w.Header()
	h.Set("ETag", etag)
	// Immutable (content-addressed) but per-tenant: browsers may keep it, shared
	// caches may not (the request carries a ticket).
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	h.Set("Vary", "Authorization")
	if inm := r.Header.Get("If-None-Match"); inm == etag || inm == "*" {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/wasm")
	h.Set("Content-Length", strconv.Itoa(len(wasm)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = bytes.NewReader(wasm).WriteTo(w)
}

// fetchError is a module fetch's answer to the player: an HTTP status and
// its text.
type fetchError struct {
	status int
	msg    string
}

func (e *fetchError) Error() string { return e.msg }

// fetchModule reads a build of tenant from the backend, checks it and caches
// it. Shared by the requests that miss the cache at once (moduleFetch), so
// it runs on its own context, bounded, not on one caller's.
func (g *Gateway) fetchModule(tenant, build string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), moduleFetchTimeout)
	defer cancel()
	resp, err := g.modules.GetModule(ctx, connect.NewRequest(&clusterv1.GetModuleRequest{TenantId: tenant, BuildId: build}))
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound || connect.CodeOf(err) == connect.CodeInvalidArgument:
		return nil, &fetchError{http.StatusNotFound, "not found: your tenant has no module build " + build}
	case err != nil:
		g.log.Warn("cannot fetch a module for a player", "tenant", tenant, "build", build, "err", err)
		return nil, &fetchError{http.StatusServiceUnavailable, "the module store is unavailable; retry in a moment"}
	}
	wasm := resp.Msg.Wasm
	if sum := sha256.Sum256(wasm); hex.EncodeToString(sum[:]) != build {
		g.log.Error("the module store returned bytes that do not match their build id", "tenant", tenant, "build", build)
		return nil, &fetchError{http.StatusBadGateway, "the module store returned a corrupt module"}
	}
	if len(wasm) > maxServedModuleBytes {
		return nil, &fetchError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the module is %d bytes, over the %d-byte limit for serving", len(wasm), maxServedModuleBytes)}
	}
	g.moduleBytes.put(tenant+"/"+build, wasm)
	return wasm, nil
}

// moduleFetchTimeout bounds a module fetch from the backend.
const moduleFetchTimeout = 30 * time.Second
