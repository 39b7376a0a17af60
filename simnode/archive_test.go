package simnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/wasmtest"
	"ludus.dev/ludus/simnode/engine"
)

// endingModule is a valid module whose match ends at its first tick, with a
// result of ticks ticks.
func endingModule(ticks int) []byte {
	result := fmt.Sprintf(`{"ended":true,"ticks":%d,"players":[]}`, ticks)
	funcs := wasmtest.ABIFuncs(wasmtest.HostileMetaBody())
	wasmtest.SetBody(funcs, "ludus_step", wasmtest.I32Const(1))
	wasmtest.SetBody(funcs, "ludus_result", wasmtest.I64Const(int64(wasmtest.DataAddr+len(wasmtest.HostileMeta))<<32|int64(len(result))))
	return wasmtest.Module{Funcs: funcs, MemoryPages: 1, ExportMemory: true, Data: []byte(wasmtest.HostileMeta + result)}.Bytes()
}

// TestArchiveKeepsReason runs a failing and an ending match on a node that
// archives into a real backend (SQLite, over HTTP), and reads the archives
// back through AdminService: state, reason, final tick and build survive.
func TestArchiveKeepsReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ludus.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const token = "archive-test-cluster-token"
	srv, err := backend.New(ctx, backend.Config{Store: st, ClusterToken: token, OperatorKey: "archive-test-operator-key",
		ValidateModule: testEng.Validate, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	admin := ludusv1connect.NewAdminServiceClient(hs.Client(), hs.URL)
	ck, err := admin.CreateTenant(ctx, withKey(&ludusv1.CreateTenantRequest{Slug: "archive-keys"}, "archive-test-operator-key"))
	if err != nil {
		t.Fatal(err)
	}
	// The games run in the tenant whose admin key reads them back.
	tenantID, key := ck.Msg.Tenant.Id, ck.Msg.AdminKey

	runaway := wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0)))
	ending := endingModule(1)
	builds := map[string]string{}
	for name, wasm := range map[string][]byte{"runaway": runaway, "ending": ending} {
		b, err := srv.EnsureModule(ctx, tenantID, name, wasm)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		builds[name] = b
	}
	if builds["runaway"] != engine.BuildID(runaway) {
		t.Fatalf("build ids differ: %s", builds["runaway"])
	}

	n, err := New(Config{ID: "n-archive", Etcd: state, Engine: testEng, Modules: NewModuleStore(hs.Client(), hs.URL, token),
		LeaseTTL: 3 * time.Second, FlushInterval: 100 * time.Millisecond, CallDeadline: 50 * time.Millisecond, ClusterToken: testToken,
		Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })

	suffix := fmt.Sprint(time.Now().UnixNano())
	games := map[string]string{} // name -> game id
	for _, name := range []string{"runaway", "ending"} {
		id := name + "-" + suffix
		if _, err := n.StartGame(ctx, clusterstate.GameSpec{TenantID: tenantID, GameID: id, BuildID: builds[name], Seed: 1}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		games[name] = id
	}

	cases := []struct {
		name, state string
		want        []string // in the message
	}{
		{"runaway", clusterstate.StateFailed, []string{"match failed: the game module exceeded its CPU deadline at tick 0", "(build " + builds["runaway"][:12]}},
		{"ending", clusterstate.StateEnded, []string{"match ended after 1 ticks", "(build " + builds["ending"][:12]}},
	}
	for _, c := range cases {
		id := games[c.name]
		var lg *ludusv1.GetGameLogResponse
		for lg == nil {
			r, err := admin.GetGameLog(ctx, withKey(&ludusv1.GetGameLogRequest{GameId: id}, key))
			switch {
			case err == nil:
				lg = r.Msg
			case connect.CodeOf(err) != connect.CodeNotFound:
				t.Fatalf("%s: GetGameLog: %v", c.name, err)
			case ctx.Err() != nil:
				t.Fatalf("%s: never archived", c.name)
			default:
				time.Sleep(50 * time.Millisecond)
			}
		}
		if lg.State != c.state || lg.FinalTick < 0 || len(lg.Chunks) == 0 {
			t.Errorf("%s: archived state %q, final tick %d, %d chunks", c.name, lg.State, lg.FinalTick, len(lg.Chunks))
		}
		if c.state == clusterstate.StateEnded && lg.FinalTick != 1 {
			t.Errorf("%s: final tick %d, want 1", c.name, lg.FinalTick)
		}
		for _, w := range c.want {
			if !strings.Contains(lg.Message, w) {
				t.Errorf("%s: GetGameLog message %q lacks %q", c.name, lg.Message, w)
			}
		}
		var spec clusterstate.GameSpec
		if err := json.Unmarshal(lg.SpecJson, &spec); err != nil || spec.BuildID != builds[c.name] || spec.GameID != id {
			t.Errorf("%s: archived spec %s: %v", c.name, lg.SpecJson, err)
		}
		ls, err := admin.ListArchivedGames(ctx, withKey(&ludusv1.ListArchivedGamesRequest{}, key))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range ls.Msg.Games {
			if g.GameId != id {
				continue
			}
			found = true
			if g.State != c.state || g.Message != lg.Message || g.FinalTick != lg.FinalTick {
				t.Errorf("%s: ListArchivedGames shows %s %q at tick %d; GetGameLog %s %q at %d", c.name, g.State, g.Message, g.FinalTick,
					lg.State, lg.Message, lg.FinalTick)
			}
		}
		if !found {
			t.Errorf("%s: not listed by ListArchivedGames", c.name)
		}
	}
}

func withKey[T any](msg *T, key string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Bearer "+key)
	return r
}
