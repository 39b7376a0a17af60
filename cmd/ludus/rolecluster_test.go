package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode/engine"
)

// roleCluster is what a test of the simnode role starts it against: an
// embedded etcd, a backend on SQLite served over HTTP/2 on loopback (as the
// roles call each other), and one tenant with the arena uploaded.
type roleCluster struct {
	etcdEndpoint string
	etcd         *clusterstate.Client
	engine       *engine.Engine
	backend      *backend.Server
	backendURL   string
	tenant       string
	quiet        *slog.Logger
}

// startRoleCluster starts a roleCluster whose backend trusts clusterToken and
// whose tenant is tenantSlug; everything stops when the test ends.
func startRoleCluster(t *testing.T, ctx context.Context, clusterToken, tenantSlug string) *roleCluster {
	t.Helper()
	c := &roleCluster{quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dir := t.TempDir()
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	c.etcdEndpoint = es.Endpoint
	if c.etcd, err = clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{es.Endpoint}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.etcd.Close() })
	if c.engine, err = engine.New(ctx, engine.Config{CacheDir: testenv.WazeroCacheDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.engine.Close(context.Background()) })
	st, err := sqlite.Open(ctx, filepath.Join(dir, "ludus.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if c.backend, err = backend.New(ctx, backend.Config{Store: st, ClusterToken: clusterToken, ValidateModule: c.engine.Validate, Logger: c.quiet}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(c.backend.Handler())
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	t.Cleanup(hs.Close)
	c.backendURL = hs.URL
	if c.tenant, err = c.backend.EnsureTenant(ctx, tenantSlug, tenantSlug); err != nil {
		t.Fatal(err)
	}
	if _, err := c.backend.EnsureModule(ctx, c.tenant, "arena", builtin.Arena); err != nil {
		t.Fatal(err)
	}
	return c
}
