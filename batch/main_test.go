package batch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode/engine"
)

// The package's tests share one embedded etcd, one engine and one backend
// (SQLite) served on loopback; each test makes its own tenant.
var (
	etcdSrv *etcdserver.Server
	state   *clusterstate.Client
	eng     *engine.Engine
	srv     *backend.Server
	hs      *httptest.Server
	// h2 serves the same backend over HTTP/2 without TLS, as the roles call
	// each other: sim nodes' workers reach it there (RemoteBackend).
	h2    *httptest.Server
	h2c   *http.Client
	clock = &testClock{}
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// The backend's Server is the Backend.
var _ Backend = (*backend.Server)(nil)

const (
	operatorKey  = "batch-test-operator-key"
	clusterToken = "batch-test-cluster-token"
)

// testClock is the backend's clock: real time plus an offset tests move.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "batch-test")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	etcdSrv, err = etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		panic(err)
	}
	defer etcdSrv.Close()
	cli, err := etcdSrv.Client()
	if err != nil {
		panic(err)
	}
	state = clusterstate.New(cli)
	defer state.Close()
	eng, err = engine.New(ctx, engine.Config{CacheDir: testenv.WazeroCacheDir()})
	if err != nil {
		panic(err)
	}
	defer eng.Close(ctx)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "ludus.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	srv, err = backend.New(ctx, backend.Config{Store: st, OperatorKey: operatorKey, ClusterToken: clusterToken,
		ValidateModule: eng.Validate, Logger: quiet, Now: clock.Now})
	if err != nil {
		panic(err)
	}
	hs = httptest.NewServer(srv.Handler())
	defer hs.Close()
	h2 = httptest.NewUnstartedServer(srv.Handler())
	h2.Config.Protocols = new(http.Protocols)
	h2.Config.Protocols.SetUnencryptedHTTP2(true)
	h2.Start()
	defer h2.Close()
	h2c = &http.Client{Transport: &http.Transport{Protocols: h2.Config.Protocols}}
	return m.Run()
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var tenants atomic.Int64

// newTenant creates a tenant with the arena module and returns its id and
// admin key.
func newTenant(t *testing.T) (string, string) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	admin := ludusv1connect.NewAdminServiceClient(hs.Client(), hs.URL)
	slug := fmt.Sprintf("bt%d-%d", os.Getpid()%10000, tenants.Add(1))
	ck, err := admin.CreateTenant(ctx, withKey(&ludusv1.CreateTenantRequest{Slug: slug}, operatorKey))
	if err != nil {
		t.Fatal(err)
	}
	id := ck.Msg.Tenant.Id
	if _, err := srv.EnsureModule(ctx, id, "arena", builtin.Arena); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelRuns(id) })
	return id, ck.Msg.AdminKey
}

// cancelRuns ends a tenant's runs, so the workers of later tests leave them.
func cancelRuns(tenant string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, _ := state.BatchRuns(ctx, tenant)
	for _, r := range runs {
		state.EndBatchRun(ctx, tenant, r.ID, clusterstate.BatchCanceled, time.Now())
	}
}

func withKey[T any](msg *T, key string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Bearer "+key)
	return r
}

// service serves BatchService on loopback and returns a client of it.
func service(t *testing.T) ludusv1connect.BatchServiceClient {
	t.Helper()
	svc := &Service{Etcd: state, Backend: srv, Engine: eng, Authorize: srv.AuthorizeTenant, Poll: 50 * time.Millisecond, Logger: quiet}
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return ludusv1connect.NewBatchServiceClient(s.Client(), s.URL)
}

// startWorker starts a worker that stops with the test.
func startWorker(t *testing.T, cfg WorkerConfig) (*Worker, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Etcd == nil {
		cfg.Etcd = state
	}
	if cfg.Backend == nil {
		cfg.Backend = srv
	}
	cfg.Engine, cfg.Logger = eng, quiet
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Reaper.Every == 0 {
		cfg.Reaper.Every = 100 * time.Millisecond
	}
	w, err := StartWorker(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-w.Done():
			case <-time.After(20 * time.Second):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// shortArena is a 5-second arena match of 4 bots (175 ticks).
const shortArena = `{"bots":4,"time_limit_s":5}`

// longArena is a 5-minute arena match of 8 bots that nobody wins early.
const longArena = `{"bots":8,"score_limit":1000,"time_limit_s":300}`

// allResults reads every result of a run, a page at a time.
func allResults(ctx context.Context, srv *backend.Server, tenant, run string, withLogs bool) ([]store.BatchResult, error) {
	var out []store.BatchResult
	err := srv.EachBatchResult(ctx, tenant, run, store.BatchResultQuery{Limit: 7, WithLogs: withLogs}, func(r store.BatchResult) error {
		out = append(out, r)
		return nil
	})
	return out, err
}
