package simnode

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/wasmtest"
)

// countingModule is a valid module (wasmtest.HostileMeta: 30 Hz, 2 players) whose
// match ends at tick ticks with a fixed result: slot 0 scored 7 and earned 5
// coins. It counts its ticks at address 0 of its memory.
func countingModule(ticks int32) []byte {
	result := fmt.Sprintf(`{"ended":true,"ticks":%d,"winner":0,"players":[{"slot":0,"score":7,"coins":5}]}`, ticks)
	load := []byte{0x28, 0x02, 0x00}  // i32.load align=4 offset=0
	store := []byte{0x36, 0x02, 0x00} // i32.store align=4 offset=0
	step := wasmtest.Cat(
		wasmtest.I32Const(0), wasmtest.I32Const(0), load, wasmtest.I32Const(1), []byte{0x6a}, store, // mem[0]++
		wasmtest.I32Const(0), load, wasmtest.I32Const(ticks), []byte{0x4e}, // mem[0] >= ticks: ended
	)
	funcs := wasmtest.ABIFuncs(wasmtest.HostileMetaBody())
	wasmtest.SetBody(funcs, "ludus_step", step)
	// The state hash is the tick count, so a replay checks something.
	wasmtest.SetBody(funcs, "ludus_state_hash", wasmtest.Cat(wasmtest.I32Const(0), load, []byte{0xad})) // i64.extend_i32_u
	wasmtest.SetBody(funcs, "ludus_result", wasmtest.I64Const(int64(wasmtest.DataAddr+len(wasmtest.HostileMeta))<<32|int64(len(result))))
	return wasmtest.Module{Funcs: funcs, MemoryPages: 1, ExportMemory: true, Data: []byte(wasmtest.HostileMeta + result)}.Bytes()
}

// resultEnv is a real backend (SQLite, over HTTP) with a tenant whose result
// rules credit a match's score as XP and its coins as gold, a webhook (never
// called: the deliveries stay queued, to be counted), an account, and the
// counting module.
type resultEnv struct {
	srv     *backend.Server
	hs      *httptest.Server
	admin   ludusv1connect.AdminServiceClient
	key     string // the tenant's admin key
	tenant  string
	account string
	build   string
}

const resultEnvToken = "result-test-cluster-token"

func newResultEnv(t *testing.T, ctx context.Context) *resultEnv {
	t.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ludus.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := backend.New(ctx, backend.Config{Store: st, ClusterToken: resultEnvToken, OperatorKey: "result-test-operator-key",
		ValidateModule: testEng.Validate, AllowPrivateWebhooks: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e := &resultEnv{srv: srv, hs: hs, admin: ludusv1connect.NewAdminServiceClient(hs.Client(), hs.URL)}
	ct, err := e.admin.CreateTenant(ctx, withKey(&ludusv1.CreateTenantRequest{Slug: "results"}, "result-test-operator-key"))
	if err != nil {
		t.Fatal(err)
	}
	e.tenant, e.key = ct.Msg.Tenant.Id, ct.Msg.AdminKey
	acc, err := e.admin.CreateAccount(ctx, withKey(&ludusv1.CreateAccountRequest{CustomId: "ada", DisplayName: "Ada"}, e.key))
	if err != nil {
		t.Fatal(err)
	}
	e.account = acc.Msg.Account.Id
	if _, err := e.admin.SetResultRules(ctx, withKey(&ludusv1.SetResultRulesRequest{Rules: []*ludusv1.ResultRule{
		{Stat: "score", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_XP, Cap: 1000},
		{Stat: "coins", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY, Target: "gold", Cap: 1000},
	}}, e.key)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.SetWebhook(ctx, withKey(&ludusv1.SetWebhookRequest{Url: hs.URL + "/hook"}, e.key)); err != nil {
		t.Fatal(err)
	}
	if e.build, err = srv.EnsureModule(ctx, e.tenant, "counting", countingModule(60)); err != nil {
		t.Fatal(err)
	}
	return e
}

// node starts a sim node archiving into and reporting to the backend through
// modules and results.
func (e *resultEnv) node(t *testing.T, id string, modules ModuleSource, results ResultReporter) *Node {
	t.Helper()
	// An address, or the fleet ranks the node for nothing (and it archives
	// no game it did not end); nothing calls it.
	n, err := New(Config{ID: id, Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: modules, Results: results, LeaseTTL: 2 * time.Second,
		FlushInterval: 100 * time.Millisecond, ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// store is the backend's module store and archive, as a node reaches it.
func (e *resultEnv) store() *ModuleStore {
	return NewModuleStore(e.hs.Client(), e.hs.URL, resultEnvToken)
}

// play starts a counting match on n with a match credential (a new one if
// credential is empty), seats ada, and waits until it has ended (its final
// chunk durable).
func (e *resultEnv) play(t *testing.T, ctx context.Context, n *Node, credential string) string {
	t.Helper()
	gameSeq++
	id := fmt.Sprintf("result%d-%d", gameSeq, time.Now().UnixNano())
	if credential == "" {
		var err error
		if credential, _, err = e.srv.MintMatchCredential(ctx, e.tenant, id, "counting"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.StartGame(ctx, clusterstate.GameSpec{TenantID: e.tenant, GameID: id, BuildID: e.build, Seed: 1, MatchCredential: credential}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Join(ctx, e.tenant, id, e.account, "Ada"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		g, err := state.View().Game(ctx, e.tenant, id)
		switch {
		case errors.Is(err, clusterstate.ErrGameNotFound):
			return id // ended, and archived already
		case err == nil && g.Status.Finished():
			if g.Status.State != clusterstate.StateEnded {
				t.Fatalf("final status %+v, want ended", g.Status)
			}
			return id
		case time.Now().After(deadline):
			t.Fatalf("game %s did not end: %+v, %v", id, g.Status, err)
		}
	}
}

// results returns the backend's stored results of match id.
func (e *resultEnv) results(t *testing.T, ctx context.Context, id string) []*ludusv1.MatchResult {
	t.Helper()
	r, err := e.admin.ListMatchResults(ctx, withKey(&ludusv1.ListMatchResultsRequest{Limit: 200}, e.key))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ludusv1.MatchResult
	for _, m := range r.Msg.Results {
		if m.MatchId == id {
			out = append(out, m)
		}
	}
	return out
}

// waitArchived waits until game id's archive is stored and its keys have
// left etcd.
func (e *resultEnv) waitArchived(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, gerr := e.admin.GetGameLog(ctx, withKey(&ludusv1.GetGameLogRequest{GameId: id}, e.key))
		_, rerr := state.ReadLog(ctx, e.tenant, id)
		if gerr == nil && errors.Is(rerr, clusterstate.ErrGameNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("game %s: archive %v, etcd %v; want archived and gone from etcd", id, gerr, rerr)
		}
	}
}

// checkAppliedOnce checks that match id's result is stored once, crediting
// ada once (7 XP, 5 gold) and queueing one webhook.
func (e *resultEnv) checkAppliedOnce(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	rs := e.results(t, ctx, id)
	if len(rs) != 1 || len(rs[0].Players) != 1 || rs[0].Players[0].AccountId != e.account || rs[0].Players[0].Score != 7 || rs[0].Players[0].Stats["coins"] != 5 {
		t.Fatalf("stored results of %s: %v; want one, ada with score 7 and 5 coins", id, rs)
	}
	p, err := e.admin.GetAccountProgression(ctx, withKey(&ludusv1.GetAccountProgressionRequest{AccountId: e.account}, e.key))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Msg.Progression; got.Xp != 7 || got.Currency["gold"] != 5 {
		t.Errorf("ada's progression: %d XP, %d gold; want 7 and 5 (credited once)", got.Xp, got.Currency["gold"])
	}
	d, err := e.admin.ListWebhookDeliveries(ctx, withKey(&ludusv1.ListWebhookDeliveriesRequest{}, e.key))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Msg.Deliveries); n != 1 || d.Msg.Deliveries[0].Event != "match.result" {
		t.Errorf("webhook deliveries %v; want one match.result", d.Msg.Deliveries)
	}
}

var errBackendDown = connect.NewError(connect.CodeUnavailable, errors.New("backend unreachable (test)"))

// downReporter is a ResultReporter that never gets through.
type downReporter struct{}

func (downReporter) Report(context.Context, string, string, int64, bool, []*ludusv1.PlayerResult) error {
	return errBackendDown
}

// noArchive is the backend's module store whose archive never gets through.
type noArchive struct{ *ModuleStore }

func (noArchive) ArchiveGame(context.Context, *clusterv1.ArchiveGameRequest) error {
	return errBackendDown
}

// TestFinalResultSurvivesNodeDeath: the node that ends a match cannot reach
// the backend and dies before it could report the result; the game stays in
// etcd, and the node that archives it replays its log, reports the same
// result, and only then archives the game and removes it from etcd. The
// result is applied once.
func TestFinalResultSurvivesNodeDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newResultEnv(t, ctx)
	log := &reportLog{}
	a := e.node(t, "n-result-a", e.store(), nodeReporter{log: log, node: "a", send: downReporter{}})
	id := e.play(t, ctx, a, "")
	tried := log.wait(t, "the ending node tries to report", id, func(rs []sentReport) bool { return len(rs) > 0 })
	crash(a)
	if rs := e.results(t, ctx, id); len(rs) != 0 {
		t.Fatalf("a result was stored: %v", rs)
	}
	if _, err := state.ReadLog(ctx, e.tenant, id); err != nil {
		t.Fatalf("the game left etcd with its result undelivered: %v", err)
	}

	e.node(t, "n-result-b", e.store(), nodeReporter{log: log, node: "b", send: NewBackendReporter(e.hs.Client(), e.hs.URL)})
	e.waitArchived(t, ctx, id)
	e.checkAppliedOnce(t, ctx, id)
	var fromB []sentReport
	for _, r := range log.of(id) {
		if r.node == "b" {
			fromB = append(fromB, r)
		}
	}
	if len(fromB) != 1 || fromB[0].err != nil || !fromB[0].final {
		t.Fatalf("reports of the archiving node:%s; want one final, accepted", describeReports(fromB))
	}
	// The replay reads the very result the ending node read.
	want := tried[0]
	if fromB[0].seq != want.seq || want.seq != 60 || len(fromB[0].players) != len(want.players) || !proto.Equal(fromB[0].players[0], want.players[0]) {
		t.Fatalf("replayed result seq %d %v; the ending node's seq %d %v", fromB[0].seq, fromB[0].players, want.seq, want.players)
	}
}

// TestFinalResultDeliveredTwiceAppliesOnce: the node that ends a match reports
// its result but dies before it could archive the game; the node that
// archives it reports the result again, and the backend applies it once: one
// result, one credit, one webhook.
func TestFinalResultDeliveredTwiceAppliesOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newResultEnv(t, ctx)
	log := &reportLog{}
	reporter := NewBackendReporter(e.hs.Client(), e.hs.URL)
	a := e.node(t, "n-twice-a", noArchive{e.store()}, nodeReporter{log: log, node: "a", send: reporter})
	id := e.play(t, ctx, a, "")
	log.wait(t, "the ending node reports", id, func(rs []sentReport) bool { return len(rs) == 1 && rs[0].err == nil })
	crash(a)
	if rs := e.results(t, ctx, id); len(rs) != 1 {
		t.Fatalf("stored results %v, want the one reported", rs)
	}

	e.node(t, "n-twice-b", e.store(), nodeReporter{log: log, node: "b", send: reporter})
	e.waitArchived(t, ctx, id)
	rs := log.of(id)
	if len(rs) != 2 || rs[1].node != "b" || rs[1].err != nil || rs[1].seq != rs[0].seq {
		t.Fatalf("reports:%s; want the ending node's, then the archiving node's, both accepted", describeReports(rs))
	}
	e.checkAppliedOnce(t, ctx, id)
}

// TestRefusedResultIsArchived: a result the backend refuses for good (here an
// unknown match credential) is not retried: the game is archived and leaves
// etcd.
func TestRefusedResultIsArchived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newResultEnv(t, ctx)
	log := &reportLog{}
	n := e.node(t, "n-refused", e.store(), nodeReporter{log: log, node: "n", send: NewBackendReporter(e.hs.Client(), e.hs.URL)})
	id := e.play(t, ctx, n, "lmc_not-a-credential")
	e.waitArchived(t, ctx, id)
	rs := log.of(id)
	if len(rs) != 1 || connect.CodeOf(rs[0].err) != connect.CodeUnauthenticated {
		t.Fatalf("reports:%s; want one, refused with Unauthenticated", describeReports(rs))
	}
	if got := e.results(t, ctx, id); len(got) != 0 {
		t.Fatalf("stored results %v", got)
	}
}

// TestKeptResultBoundToItsLog: a result a node kept is the result of a log
// only if that log ends with the very chunk it was read after.
func TestKeptResultBoundToItsLog(t *testing.T) {
	final := []byte("final chunk")
	r := &finalResult{logSeq: 9, chunk: sha256.Sum256(final)}
	for _, c := range []struct {
		chunk clusterstate.LogChunk
		want  bool
	}{
		{clusterstate.LogChunk{Seq: 9, Data: final}, true},
		{clusterstate.LogChunk{Seq: 9, Data: []byte("another run's last chunk")}, false},
		{clusterstate.LogChunk{Seq: 10, Data: final}, false},
	} {
		if got := r.of(c.chunk); got != c.want {
			t.Errorf("of(seq %d, %q) = %v, want %v", c.chunk.Seq, c.chunk.Data, got, c.want)
		}
	}
}

// tooBigArchive is the backend's module store, refusing an archive with
// chunks as too large, as the backend does past MaxArchiveBytes.
type tooBigArchive struct{ *ModuleStore }

func (s tooBigArchive) ArchiveGame(ctx context.Context, req *clusterv1.ArchiveGameRequest) error {
	if len(req.Chunks) > 0 {
		return connect.NewError(connect.CodeResourceExhausted, errors.New("game log is 70000000 bytes; the archive takes at most 67108864 (test)"))
	}
	return s.ModuleStore.ArchiveGame(ctx, req)
}

// TestLogTooLargeToArchive: a game whose log the backend refuses for its
// size is archived without the log, saying so, and leaves etcd, rather
// than staying there for good; its result is delivered once as always.
func TestLogTooLargeToArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newResultEnv(t, ctx)
	log := &reportLog{}
	a := e.node(t, "n-toobig", tooBigArchive{e.store()}, nodeReporter{log: log, node: "a", send: NewBackendReporter(e.hs.Client(), e.hs.URL)})
	id := e.play(t, ctx, a, "")
	e.waitArchived(t, ctx, id)
	gl, err := e.admin.GetGameLog(ctx, withKey(&ludusv1.GetGameLogRequest{GameId: id}, e.key))
	if err != nil {
		t.Fatal(err)
	}
	if len(gl.Msg.Chunks) != 0 || !strings.Contains(gl.Msg.Message, "larger than an archive holds and was not kept") {
		t.Fatalf("archive: %d chunks, message %q; want none, and a message that says why", len(gl.Msg.Chunks), gl.Msg.Message)
	}
	e.checkAppliedOnce(t, ctx, id)
}
