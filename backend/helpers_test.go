package backend_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
)

const (
	operatorKey  = "op-key-0123456789abcdef"
	clusterToken = "cluster-token-0123456789"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeValidate accepts anything starting with the wasm magic and takes the
// module's "name" from the bytes after it, if printable.
func fakeValidate(_ context.Context, wasm []byte) (abi.Meta, error) {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return abi.Meta{}, errors.New(`not a WebAssembly module: bad magic number (want "\x00asm")`)
	}
	if bytes.Contains(wasm, []byte("bad-meta")) {
		return abi.Meta{Name: "x", TickRate: 0, MaxPlayers: 8, FrameDivisor: 1, ViewFormat: "indexed8"}, nil
	}
	return abi.Meta{Name: "arena", TickRate: 30, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "indexed8", ViewWidth: 160, ViewHeight: 120}, nil
}

func wasm(s string) []byte { return append([]byte("\x00asm\x01\x00\x00\x00"), s...) }

type fakeFleet struct {
	mu      sync.Mutex
	tenants []string
	err     error
	// games are listed after the one running game every tenant has.
	games []*ludusv1.GameInfo
	// batch maps the batch runs that have not ended to their builds.
	batch map[string]string
}

// set replaces the fleet's games and batch runs.
func (f *fakeFleet) set(games []*ludusv1.GameInfo, batch map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.games, f.batch = games, batch
}

func (f *fakeFleet) ActiveBatchBuilds(context.Context, string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]string{}
	for run, build := range f.batch {
		out[run] = build
	}
	return out, nil
}

func (f *fakeFleet) ListNodes(context.Context) ([]*ludusv1.Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	return []*ludusv1.Node{{Id: "n1", Address: "10.0.0.1:7000", Region: "eu", Capacity: 100, Games: 3}}, nil
}

func (f *fakeFleet) ListGames(_ context.Context, tenantID string) ([]*ludusv1.GameInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tenants = append(f.tenants, tenantID)
	if f.err != nil {
		return nil, f.err
	}
	return append([]*ludusv1.GameInfo{{GameId: "g-" + tenantID, ModuleName: "arena", State: "running"}}, f.games...), nil
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a backend on a real SQLite file, served on 127.0.0.1.
type env struct {
	t      *testing.T
	dbPath string
	clock  *fakeClock
	fleet  *fakeFleet
	logs   *syncBuffer
	store  store.Store
	srv    *backend.Server
	http   *httptest.Server

	auth    ludusv1connect.AuthServiceClient
	admin   ludusv1connect.AdminServiceClient
	modules clusterv1connect.ModuleStoreServiceClient
	prog    ludusv1connect.ProgressionServiceClient
	reports ludusv1connect.MatchReportServiceClient

	// reopen opens the store again after stop (default: the SQLite file).
	reopen func() store.Store
	// opts configure every Server the env starts (restarts too).
	opts []option
}

type option func(*backend.Config)

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	e := &env{
		t:      t,
		dbPath: filepath.Join(t.TempDir(), "ludus.db"),
		clock:  &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		fleet:  &fakeFleet{},
		logs:   &syncBuffer{},
		opts:   opts,
	}
	e.start()
	return e
}

// start opens the store and serves a new Server over it.
func (e *env) start() {
	t := e.t
	t.Helper()
	st, err := sqlite.Open(context.Background(), e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	e.startWith(st)
}

// fakeDNS answers webhook host lookups in tests, which never ask a real
// resolver: names here resolve as listed, any other name does not resolve.
var fakeDNS = map[string][]netip.Addr{
	"example.com":       {netip.MustParseAddr("93.184.215.14")},
	"hooks.example.com": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")},
	"internal.example":  {netip.MustParseAddr("10.1.2.3")},
	"mixed.example":     {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
	"localhost":         {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
}

func fakeLookup(_ context.Context, host string) ([]netip.Addr, error) {
	if ips, ok := fakeDNS[strings.ToLower(host)]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (e *env) startWith(st store.Store) {
	t := e.t
	t.Helper()
	cfg := backend.Config{
		Store:          st,
		ClusterToken:   clusterToken,
		OperatorKey:    operatorKey,
		ValidateModule: fakeValidate,
		Fleet:          e.fleet,
		Now:            e.clock.Now,
		Logger:         slog.New(slog.NewTextHandler(e.logs, nil)),
		PasswordParams: &backend.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}, // fast; production uses OWASP's
	}
	backend.SetLookupIP(&cfg, fakeLookup)
	for _, o := range e.opts {
		o(&cfg)
	}
	srv, err := backend.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.http = httptest.NewServer(srv.Handler())
	if !strings.HasPrefix(e.http.URL, "http://127.0.0.1:") {
		t.Fatalf("server not on loopback: %s", e.http.URL)
	}
	hc := e.http.Client()
	e.auth = ludusv1connect.NewAuthServiceClient(hc, e.http.URL)
	e.admin = ludusv1connect.NewAdminServiceClient(hc, e.http.URL)
	e.modules = clusterv1connect.NewModuleStoreServiceClient(hc, e.http.URL, connect.WithReadMaxBytes(backend.MaxRequestBytes))
	e.prog = ludusv1connect.NewProgressionServiceClient(hc, e.http.URL)
	e.reports = ludusv1connect.NewMatchReportServiceClient(hc, e.http.URL)
	t.Cleanup(e.stop)
}

// stop shuts the server and closes the store (idempotent).
func (e *env) stop() {
	if e.http != nil {
		e.http.Close()
		e.http = nil
	}
	if e.store != nil {
		e.store.Close()
		e.store = nil
	}
}

func (e *env) restart() {
	e.stop()
	if e.reopen != nil {
		e.store = e.reopen()
		e.startWith(e.store)
		return
	}
	e.start()
}

func (e *env) jwksURL() string { return e.http.URL + "/.well-known/jwks.json" }

// req builds a request with a bearer credential (none if empty).
func req[T any](msg *T, bearer string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if bearer != "" {
		r.Header().Set("Authorization", "Bearer "+bearer)
	}
	return r
}

// createTenant creates a tenant with the operator key and returns it with its admin key.
func (e *env) createTenant(slug string) (*ludusv1.Tenant, string) {
	e.t.Helper()
	resp, err := e.admin.CreateTenant(context.Background(), req(&ludusv1.CreateTenantRequest{Slug: slug, Name: "Studio " + slug}, operatorKey))
	if err != nil {
		e.t.Fatalf("CreateTenant(%s): %v", slug, err)
	}
	return resp.Msg.Tenant, resp.Msg.AdminKey
}

func (e *env) guestLogin(tenant, device, name string) *ludusv1.GuestLoginResponse {
	e.t.Helper()
	resp, err := e.auth.GuestLogin(context.Background(), connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: tenant, DeviceId: device, DisplayName: name}))
	if err != nil {
		e.t.Fatalf("GuestLogin(%s, %s): %v", tenant, device, err)
	}
	return resp.Msg
}

// refresh calls Refresh with a tenant's refresh token and returns the new session.
func (e *env) refresh(tenant, token string) (*ludusv1.Session, error) {
	r, err := e.auth.Refresh(context.Background(), connect.NewRequest(&ludusv1.RefreshRequest{Tenant: tenant, RefreshToken: token}))
	if err != nil {
		return nil, err
	}
	return r.Msg.Session, nil
}

// wantCode checks a Connect error's code and that its message contains each of subs.
func wantCode(t *testing.T, err error, code connect.Code, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("succeeded, want %v", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("not a connect error: %v", err)
	}
	for _, s := range subs {
		if !strings.Contains(ce.Message(), s) {
			t.Fatalf("message %q does not contain %q", ce.Message(), s)
		}
	}
}
