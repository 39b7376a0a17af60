package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/engine"
)

func nodeCred(t *testing.T, token, node string) string {
	t.Helper()
	c, err := clustercred.Node(token, node)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startReaper runs a reaper that plays no games (RunReaper) until the test
// ends: sim nodes' workers have none.
func startReaper(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunReaper(ctx, state, srv, "test-reaper", 2*time.Second, ReaperConfig{Every: 100 * time.Millisecond}, quiet)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// A run played by a sim node's worker: RemoteBackend over HTTP/2 on
// loopback with the node's own credential, no reaper of its own, its games
// paused while LiveLate says the node's live matches are late. Every game
// has exactly one result, recorded with the node as its worker, and the
// backend's reaper records the run the node's worker ended.
func TestRemoteWorkerPlaysRun(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, _ := newTenant(t)
	startReaper(t)
	var asked, late atomic.Int64
	late.Store(1) // late at first: the worker must wait
	liveLate := func() bool {
		asked.Add(1)
		return late.Load() != 0
	}
	remote := NewRemoteBackend(h2c, h2.URL, nodeCred(t, clusterToken, "simnode-7"))
	w, _ := startWorker(t, WorkerConfig{ID: "simnode-7", Backend: remote, NoReaper: true, Concurrency: 2, LiveLate: liveLate})
	const n = 8
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: n, Maps: []Map{{Config: json.RawMessage(shortArena)}},
		Budget: time.Hour, KeepLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	// While live matches are late the worker's games make no progress.
	for asked.Load() < 10 {
		if ctx.Err() != nil {
			t.Fatal("the worker never asked whether live matches are late")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if _, p, err := state.BatchRunProgress(ctx, tenant, run.ID); err != nil || p.Done != 0 {
		t.Fatalf("games finished while live matches were late: %+v %v", p, err)
	}
	late.Store(0)
	r := waitEnded(t, ctx, tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != n || r.Final.Failed != 0 {
		t.Fatalf("run ended %s with %+v", r.Reason, r.Final)
	}
	results, err := allResults(ctx, srv, tenant, run.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != n {
		t.Fatalf("%d results for %d games", len(results), n)
	}
	for i, res := range results {
		if res.Game != i || res.Worker != "simnode-7" || res.Error != "" || res.Ticks == 0 || len(res.Result) == 0 || len(res.Log) == 0 {
			t.Errorf("result %d: game %d worker %q error %q ticks %d result %d B log %d B", i, res.Game, res.Worker, res.Error, res.Ticks, len(res.Result), len(res.Log))
		}
	}
	if w.Played() != n {
		t.Errorf("the node's worker acknowledged %d games, want %d", w.Played(), n)
	}
	// The node's worker ended the run in etcd; the reaper records it.
	for {
		rec, err := srv.BatchRun(ctx, tenant, run.ID)
		if err == nil && rec.State == "ended" {
			if rec.Done != n || rec.Reason != clusterstate.BatchComplete {
				t.Fatalf("backend record %+v", rec)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the ended run was never recorded in the backend: %+v %v", rec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A worker whose Backend is only a WorkerBackend cannot be the reaper.
func TestRemoteWorkerNeedsNoReaper(t *testing.T) {
	_, err := StartWorker(context.Background(), WorkerConfig{Etcd: state, Backend: NewRemoteBackend(h2c, h2.URL, "x")})
	if err == nil || !strings.Contains(err.Error(), "NoReaper") {
		t.Fatalf("StartWorker with a RemoteBackend and a reaper: %v", err)
	}
}

func wantCode(t *testing.T, what string, err error, code connect.Code, msg ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %q does not say %q", what, err, m)
		}
	}
}

// BatchWorkerService: a node credential and the cluster token fetch modules
// and store results; any other credential is Unauthenticated; a node
// credential stays PermissionDenied everywhere else; a result is stored only
// for a running run of the tenant, for one of its games, once, within the
// documented bounds.
func TestBatchWorkerServiceAuth(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, admin := newTenant(t)
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 3, Maps: []Map{{Config: json.RawMessage(shortArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	svc := ludusv1connect.NewBatchWorkerServiceClient(h2c, h2.URL)
	node := nodeCred(t, clusterToken, "simnode-3")
	put := func(cred string, m *ludusv1.PutBatchResultRequest) (*connect.Response[ludusv1.PutBatchResultResponse], error) {
		return svc.PutBatchResult(ctx, withKey(m, cred))
	}
	result := func(game int32) *ludusv1.PutBatchResultRequest {
		return &ludusv1.PutBatchResultRequest{TenantId: tenant, RunId: run.ID, Game: game, Map: "map0", Seed: 9, Winner: 2,
			Ticks: 175, Ended: true, CpuNs: 1e6, ResultJson: []byte(`{"winner":2}`), Worker: "claims-to-be-another"}
	}

	// The node's own credential: the module, and a result stored once.
	mod, err := svc.GetBatchModule(ctx, withKey(&ludusv1.GetBatchModuleRequest{TenantId: tenant, BuildId: engine.BuildID(builtin.Arena)}, node))
	if err != nil || !bytes.Equal(mod.Msg.Wasm, builtin.Arena) || mod.Msg.BuildId != engine.BuildID(builtin.Arena) {
		t.Fatalf("GetBatchModule with a node credential: %v", err)
	}
	byName, wasm, err := NewRemoteBackend(h2c, h2.URL, node).BatchModule(ctx, tenant, "arena", "")
	if err != nil || byName != engine.BuildID(builtin.Arena) || !bytes.Equal(wasm, builtin.Arena) {
		t.Fatalf("GetBatchModule by name: %q %v", byName, err)
	}
	got, err := put(node, result(0))
	if err != nil || !got.Msg.Stored {
		t.Fatalf("PutBatchResult with a node credential: %v %v", got, err)
	}
	again := result(0)
	again.Winner = 0
	if got, err := put(node, again); err != nil || got.Msg.Stored {
		t.Fatalf("a second result of game 0: %v %v, want not stored", got, err)
	}
	// The cluster token works too, and names the worker itself.
	if got, err := put(clusterToken, result(1)); err != nil || !got.Msg.Stored {
		t.Fatalf("PutBatchResult with the cluster token: %v %v", got, err)
	}
	rs, err := allResults(ctx, srv, tenant, run.ID, false)
	if err != nil || len(rs) != 2 {
		t.Fatalf("stored results %+v %v", rs, err)
	}
	if rs[0].Winner != 2 || rs[0].Worker != "simnode-3" || rs[0].Ticks != 175 || string(rs[0].Result) != `{"winner":2}` {
		t.Errorf("game 0 as stored: %+v (the first result, with the node as its worker)", rs[0])
	}
	if rs[1].Worker != "claims-to-be-another" {
		t.Errorf("game 1 as stored with the cluster token: worker %q", rs[1].Worker)
	}

	// Wrong credentials.
	gw, _ := clustercred.GatewayToNode(clusterToken, "simnode-3")
	for name, bad := range map[string]string{
		"garbage":                           "not-a-credential",
		"another cluster's node credential": nodeCred(t, "another-cluster-token-01", "simnode-3"),
		"a tampered node credential":        node[:len(node)-2] + "xx",
		"the gateway-to-node credential":    gw,
		"the operator key":                  operatorKey,
		"the tenant's admin key":            admin,
	} {
		_, err := put(bad, result(2))
		wantCode(t, "PutBatchResult with "+name, err, connect.CodeUnauthenticated, "wrong cluster token or node credential")
		_, err = svc.GetBatchModule(ctx, withKey(&ludusv1.GetBatchModuleRequest{TenantId: tenant, BuildId: engine.BuildID(builtin.Arena)}, bad))
		wantCode(t, "GetBatchModule with "+name, err, connect.CodeUnauthenticated)
	}
	_, err = svc.PutBatchResult(ctx, connect.NewRequest(result(2)))
	wantCode(t, "PutBatchResult without a credential", err, connect.CodeUnauthenticated, "missing")
	// A bad request without a credential learns nothing of the rules.
	_, err = svc.PutBatchResult(ctx, connect.NewRequest(&ludusv1.PutBatchResultRequest{}))
	wantCode(t, "an empty request without a credential", err, connect.CodeUnauthenticated)
	// The node credential gains nothing elsewhere.
	cs := clusterv1connect.NewModuleStoreServiceClient(h2c, h2.URL)
	_, err = cs.MintMatchCredential(ctx, withKey(&clusterv1.MintMatchCredentialRequest{TenantId: tenant, MatchId: "m-1", Game: "arena"}, node))
	wantCode(t, "MintMatchCredential with a node credential", err, connect.CodePermissionDenied)

	// Runs and games that are not there.
	missing := result(2)
	missing.RunId = "bnosuchrun"
	_, err = put(node, missing)
	wantCode(t, "a result of a run that does not exist", err, connect.CodeNotFound, "no batch run", "bnosuchrun")
	other, _ := newTenant(t)
	theirs := result(2)
	theirs.TenantId = other
	_, err = put(node, theirs)
	wantCode(t, "a result under another tenant", err, connect.CodeNotFound, "no batch run")
	_, err = put(node, result(3))
	wantCode(t, "game 3 of a run of 3", err, connect.CodeInvalidArgument, "games 0..2", "no game 3")
	_, err = svc.GetBatchModule(ctx, withKey(&ludusv1.GetBatchModuleRequest{TenantId: tenant, Module: "nosuch"}, node))
	wantCode(t, "an unknown module", err, connect.CodeNotFound)

	// Requests outside the rules of batch.proto.
	for name, mod := range map[string]func(m *ludusv1.PutBatchResultRequest){
		"a run id with a slash":      func(m *ludusv1.PutBatchResultRequest) { m.RunId = "a/b" },
		"a negative game":            func(m *ludusv1.PutBatchResultRequest) { m.Game = -1 },
		"no tenant":                  func(m *ludusv1.PutBatchResultRequest) { m.TenantId = "" },
		"a result over the bound":    func(m *ludusv1.PutBatchResultRequest) { m.ResultJson = make([]byte, MaxResultBytes+1) },
		"a log over the bound":       func(m *ludusv1.PutBatchResultRequest) { m.Log = make([]byte, MaxLogBytes+1) },
		"an error over the bound":    func(m *ludusv1.PutBatchResultRequest) { m.Error = strings.Repeat("e", MaxErrorBytes+1) },
		"a worker id over the bound": func(m *ludusv1.PutBatchResultRequest) { m.Worker = strings.Repeat("w", maxWorkerIDBytes+1) },
	} {
		m := result(2)
		mod(m)
		_, err := put(node, m)
		wantCode(t, name, err, connect.CodeInvalidArgument)
	}
	_, err = svc.GetBatchModule(ctx, withKey(&ludusv1.GetBatchModuleRequest{TenantId: tenant}, node))
	wantCode(t, "GetBatchModule of nothing", err, connect.CodeInvalidArgument, "name a module or a build id")
	// At the bounds it is stored.
	full := result(2)
	full.ResultJson = bytes.Repeat([]byte(" "), MaxResultBytes)
	full.Error = strings.Repeat("e", MaxErrorBytes)
	if got, err := put(node, full); err != nil || !got.Msg.Stored {
		t.Fatalf("a result at the bounds: %v", err)
	}

	// An ended (and recorded) run takes no more results.
	if err := endRun(ctx, state, srv, tenant, run.ID, clusterstate.BatchCanceled); err != nil {
		t.Fatal(err)
	}
	run2, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(shortArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := endRun(ctx, state, srv, tenant, run2.ID, clusterstate.BatchCanceled); err != nil {
		t.Fatal(err)
	}
	late := result(0)
	late.RunId = run2.ID
	_, err = put(node, late)
	wantCode(t, "a result of an ended run", err, connect.CodeFailedPrecondition, "has ended (canceled)")
	if rs, _ := allResults(ctx, srv, tenant, run2.ID, false); len(rs) != 0 {
		t.Errorf("an ended run took a result: %+v", rs)
	}
}

// A game that lost its worker MaxAttempts times (workers that vanished while
// playing it) is recorded as failed without being played again, and the run
// completes.
func TestGameThatLosesItsWorkersIsRecordedFailed(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, _ := newTenant(t)
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(longArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Three workers claim the game and vanish (their leases end).
	for i := range 3 {
		l, err := state.GrantLease(ctx, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cl, ok, err := state.ClaimBatchItem(ctx, l, "doomed", tenant, run.ID, 0)
		if err != nil || !ok || cl.Attempt != i+1 {
			t.Fatalf("claim %d: %+v %v %v", i, cl, ok, err)
		}
		l.Close()
	}
	w, _ := startWorker(t, WorkerConfig{ID: "fourth", Concurrency: 1, MaxAttempts: 3})
	r := waitEnded(t, ctx, tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != 1 || r.Final.Failed != 1 || r.Final.Ticks != 0 {
		t.Fatalf("run ended %s with %+v, want complete with one failed game never played", r.Reason, r.Final)
	}
	rs, err := allResults(ctx, srv, tenant, run.ID, false)
	if err != nil || len(rs) != 1 {
		t.Fatalf("results %+v %v", rs, err)
	}
	if !strings.Contains(rs[0].Error, "lost its worker 3 times") || rs[0].Ticks != 0 || rs[0].Worker != "fourth" || rs[0].Winner != -1 {
		t.Errorf("result %+v", rs[0])
	}
	if w.Played() != 1 {
		t.Errorf("the worker acknowledged %d games", w.Played())
	}
}

// fit keeps every result within the bounds BatchWorkerService takes.
func TestFitBoundsResults(t *testing.T) {
	r := Result{Winner: 3, Result: make([]byte, MaxResultBytes+1), Log: make([]byte, MaxLogBytes+1),
		Error: strings.Repeat("é", MaxErrorBytes) + "\xff"}
	fit(&r)
	if r.Result != nil || r.Log != nil || r.Winner != -1 {
		t.Errorf("oversized result and log kept: %d %d, winner %d", len(r.Result), len(r.Log), r.Winner)
	}
	if len(r.Error) > MaxErrorBytes || !utf8.ValidString(r.Error) || !strings.HasPrefix(r.Error, "the module's result is") ||
		!strings.Contains(r.Error, "input log is") || !strings.Contains(r.Error, "é") {
		t.Errorf("error of %d bytes, valid UTF-8 %v", len(r.Error), utf8.ValidString(r.Error))
	}
	small := Result{Winner: 1, Result: []byte(`{}`), Log: []byte{1}}
	fit(&small)
	if small.Error != "" || small.Winner != 1 || string(small.Result) != `{}` || len(small.Log) != 1 {
		t.Errorf("a small result changed: %+v", small)
	}
	over := Result{Result: make([]byte, MaxResultBytes+1)}
	fit(&over)
	if !strings.Contains(over.Error, "a batch result holds at most") {
		t.Errorf("error %q", over.Error)
	}
}

// A worker that cannot store a result (the backend unavailable for a
// moment) tries again instead of giving back a game it played; the game is
// acknowledged only once stored, and stored once.
func TestWorkerRetriesStoringResult(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, _ := newTenant(t)
	var refused, puts atomic.Int64
	flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ludusv1connect.BatchWorkerServicePutBatchResultProcedure {
			if puts.Add(1) <= 2 {
				refused.Add(1)
				http.Error(w, "restarting", http.StatusServiceUnavailable)
				return
			}
		}
		srv.Handler().ServeHTTP(w, r)
	})
	fs := httptest.NewUnstartedServer(flaky)
	fs.Config.Protocols = new(http.Protocols)
	fs.Config.Protocols.SetUnencryptedHTTP2(true)
	fs.Start()
	t.Cleanup(fs.Close)
	remote := NewRemoteBackend(h2c, fs.URL, nodeCred(t, clusterToken, "simnode-r"))
	// The runner asks LiveLate after every chunk of 35 ticks: how many
	// chunks were played tells how many times the game was.
	var chunks atomic.Int64
	live := func() bool { chunks.Add(1); return false }
	w, _ := startWorker(t, WorkerConfig{ID: "simnode-r", Backend: remote, NoReaper: true, Concurrency: 1, LiveLate: live})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(shortArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := waitEnded(t, ctx, tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != 1 || r.Final.Failed != 0 {
		t.Fatalf("run ended %s with %+v", r.Reason, r.Final)
	}
	if refused.Load() != 2 || puts.Load() != 3 || w.Played() != 1 {
		t.Fatalf("%d tries to store, %d refused, %d acknowledged; want 3, 2, 1", puts.Load(), refused.Load(), w.Played())
	}
	rs, err := allResults(ctx, srv, tenant, run.ID, false)
	if err != nil || len(rs) != 1 || rs[0].Worker != "simnode-r" {
		t.Fatalf("results %+v %v", rs, err)
	}
	if want := (rs[0].Ticks + 34) / 35; chunks.Load() != want {
		t.Fatalf("%d chunks played for a game of %d ticks (%d chunks): the game was played again instead of its result stored again", chunks.Load(), rs[0].Ticks, want)
	}
}
