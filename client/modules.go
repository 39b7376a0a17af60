package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"ludus.dev/ludus/simnode/engine"
)

// ErrModuleMismatch: the bytes served for a build id do not hash to it. They
// are never compiled or run.
var ErrModuleMismatch = errors.New("client: the module's bytes do not match its build id (SHA-256)")

// MaxModuleBytes is the largest module the client downloads (the backend
// accepts uploads up to 32 MiB).
const MaxModuleBytes = 32 << 20

// moduleLoad is a fetch and compile in progress, shared by its callers: it
// runs on a context of its own, which ends when the last of them stops
// waiting (or after moduleLoadTimeout), so that one caller's deadline never
// fails another's load.
type moduleLoad struct {
	done    chan struct{}
	mod     *engine.Module // set before done closes
	err     error
	waiters int // guarded by modMu
	cancel  context.CancelFunc
}

// moduleLoadTimeout bounds a shared module load (a download of up to
// MaxModuleBytes and a compile of seconds).
const moduleLoadTimeout = 5 * time.Minute

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

// engine returns the client's wazero engine, created on first use.
func (c *Client) engine(ctx context.Context) (*engine.Engine, error) {
	c.engMu.Lock()
	defer c.engMu.Unlock()
	if c.eng != nil {
		return c.eng, nil
	}
	cfg := c.cfg.engineCfg
	cfg.CacheDir = c.cfg.cacheDir
	eng, err := engine.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start wazero: %w", err)
	}
	c.eng = eng
	return eng, nil
}

// Module returns the game module of a build: fetched from the gateway
// (GET /modules/{build_id}.wasm with the session ticket), checked to hash to
// buildID, validated and compiled by wazero. Modules are kept in memory by
// build id for the Client's life, so each is fetched and compiled once;
// concurrent callers share one load, each one's ctx ending only its own wait
// (the load stops when no caller waits for it any more). A failed load is not
// remembered.
func (c *Client) Module(ctx context.Context, buildID string) (*engine.Module, error) {
	if !validBuildID(buildID) {
		return nil, fmt.Errorf("client: %q is not a build id (a lowercase hex SHA-256)", buildID)
	}
	c.modMu.Lock()
	if m, ok := c.modules[buildID]; ok {
		c.modMu.Unlock()
		return m, nil
	}
	l, ok := c.loading[buildID]
	if !ok {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moduleLoadTimeout)
		l = &moduleLoad{done: make(chan struct{}), cancel: cancel}
		c.loading[buildID] = l
		go func() {
			mod, err := c.loadModule(lctx, buildID)
			cancel()
			c.modMu.Lock()
			if c.loading[buildID] == l {
				delete(c.loading, buildID)
			}
			if err == nil {
				c.modules[buildID] = mod
			}
			l.mod, l.err = mod, err
			c.modMu.Unlock()
			close(l.done)
		}()
	}
	l.waiters++
	c.modMu.Unlock()
	select {
	case <-l.done:
		return l.mod, l.err
	case <-ctx.Done():
		// Stop waiting; the last caller to leave stops the load, and the
		// next caller starts a new one.
		c.modMu.Lock()
		l.waiters--
		if l.waiters == 0 {
			l.cancel()
			if c.loading[buildID] == l {
				delete(c.loading, buildID)
			}
		}
		c.modMu.Unlock()
		return nil, ctx.Err()
	}
}

func (c *Client) loadModule(ctx context.Context, buildID string) (*engine.Module, error) {
	wasm, err := c.fetchModule(ctx, buildID)
	if err != nil {
		return nil, err
	}
	eng, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	m, err := eng.Compile(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("compile module %s: %w", short(buildID), err)
	}
	return m, nil
}

// fetchModule downloads a module's bytes and checks them against buildID.
func (c *Client) fetchModule(ctx context.Context, buildID string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		ticket, err := c.Ticket(ctx)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/modules/"+buildID+".wasm", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+ticket)
		resp, err := c.hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetch module %s: %w", short(buildID), err)
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			resp.Body.Close()
			c.expireTicket(ticket)
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxModuleBytes+1))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("fetch module %s: %w", short(buildID), err)
		}
		if resp.StatusCode != http.StatusOK {
			msg := strings.TrimSpace(string(body))
			if len(msg) > 200 {
				msg = msg[:200]
			}
			return nil, fmt.Errorf("fetch module %s: %s: %s", short(buildID), resp.Status, msg)
		}
		if len(body) > MaxModuleBytes {
			return nil, fmt.Errorf("fetch module %s: over %d bytes", short(buildID), MaxModuleBytes)
		}
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); got != buildID {
			return nil, fmt.Errorf("%w: fetched %d bytes for build %s whose SHA-256 is %s", ErrModuleMismatch, len(body), short(buildID), short(got))
		}
		return body, nil
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// frameRenderer draws snapshots into frames; *engine.Renderer is one. The
// frame returned may alias the renderer's memory until the next call.
type frameRenderer interface {
	Render(ctx context.Context, snapshot []byte) ([]byte, error)
	Close(ctx context.Context) error
}

// moduleRenderer is a new renderer of the build's module: its ludus_render
// on an instance of its own.
func (c *Client) moduleRenderer(ctx context.Context, buildID string) (frameRenderer, error) {
	m, err := c.Module(ctx, buildID)
	if err != nil {
		return nil, err
	}
	if !m.HasRenderer {
		return nil, fmt.Errorf("module %s has no renderer (no snapshot_format): %w", short(buildID), engine.ErrNoRenderer)
	}
	r, err := m.NewRenderer(ctx, engine.InstanceOptions{})
	if err != nil {
		return nil, fmt.Errorf("start the renderer of module %s: %w", short(buildID), err)
	}
	return r, nil
}
