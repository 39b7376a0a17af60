package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// fakeModules is an AdminService holding a list of builds; it records the
// delete and prune requests it gets.
type fakeModules struct {
	ludusv1connect.UnimplementedAdminServiceHandler
	mu      sync.Mutex
	modules []*ludusv1.Module
	deletes []*ludusv1.DeleteModuleRequest
	prunes  []*ludusv1.PruneModulesRequest
}

func (f *fakeModules) ListModules(context.Context, *connect.Request[ludusv1.ListModulesRequest]) (*connect.Response[ludusv1.ListModulesResponse], error) {
	return connect.NewResponse(&ludusv1.ListModulesResponse{Modules: f.modules, MaxBuilds: 200, MaxBytes: 2 << 30}), nil
}

func (f *fakeModules) DeleteModule(_ context.Context, req *connect.Request[ludusv1.DeleteModuleRequest]) (*connect.Response[ludusv1.DeleteModuleResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, req.Msg)
	if req.Msg.BuildId == f.modules[0].BuildId {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("build aaaaaaaaaaaa is in use by live game g1"))
	}
	return connect.NewResponse(&ludusv1.DeleteModuleResponse{Deleted: []*ludusv1.Module{{Name: "arena", BuildId: req.Msg.BuildId, SizeBytes: 3 << 20}}}), nil
}

func (f *fakeModules) PruneModules(_ context.Context, req *connect.Request[ludusv1.PruneModulesRequest]) (*connect.Response[ludusv1.PruneModulesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prunes = append(f.prunes, req.Msg)
	return connect.NewResponse(&ludusv1.PruneModulesResponse{
		Deleted: []*ludusv1.Module{{Name: req.Msg.Name, BuildId: strings.Repeat("c", 64), SizeBytes: 1 << 20}},
		Kept:    []*ludusv1.KeptModule{{BuildId: strings.Repeat("b", 64), Reason: "build bbbbbbbbbbbb is in use by live game g2"}},
	}), nil
}

// TestCtlModules: the listing shows what a person needs to pick builds to
// delete; module delete takes a build id or a unique prefix of one (and
// refuses short, ambiguous, unknown or non-hex ones before asking the
// server); module prune sends the name and how many to keep.
func TestCtlModules(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := &fakeModules{modules: []*ludusv1.Module{
		{Name: "arena", BuildId: strings.Repeat("a", 64), SizeBytes: 3 << 20, TickRate: 30, MaxPlayers: 8, CreatedAt: at},
		{Name: "arena", BuildId: "abcdef01" + strings.Repeat("1", 56), SizeBytes: 3 << 20, TickRate: 30, MaxPlayers: 8, CreatedAt: at},
		{Name: "arena", BuildId: "abcdef02" + strings.Repeat("2", 56), SizeBytes: 3 << 20, TickRate: 30, MaxPlayers: 8, CreatedAt: at},
		{Name: "tanks", BuildId: strings.Repeat("d", 64), SizeBytes: 512, TickRate: 20, MaxPlayers: 4, CreatedAt: at},
	}}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAdminServiceHandler(f))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runCtl(ctx, append([]string{"--url", srv.URL, "--key", "lds_k"}, args...), &out)
		return out.String(), err
	}

	out, err := run("modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 builds, 9 MiB (the tenant may store 200 builds, 2 GiB)", "abcdef0111111111", "3 MiB", "512 B", "2026-03-01"} {
		if !strings.Contains(out, want) {
			t.Errorf("modules output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "newest: new games use it"); n != 2 {
		t.Errorf("%d builds marked newest, want one per name (2):\n%s", n, out)
	}

	out, err = run("module", "delete", "ABCDEF01", "--name", "arena")
	if err != nil || !strings.Contains(out, "deleted arena build abcdef0111") {
		t.Fatalf("delete by prefix = %q, %v", out, err)
	}
	if len(f.deletes) != 1 || f.deletes[0].BuildId != f.modules[1].BuildId || f.deletes[0].Name != "arena" {
		t.Fatalf("delete sent %v", f.deletes)
	}
	if _, err := run("module", "delete", strings.Repeat("a", 64)); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "live game g1") {
		t.Errorf("delete of a build in use = %v", err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"module", "delete"}, "usage"},
		{[]string{"module", "delete", "aaaaaaaa", "bbbbbbbb"}, "usage"},
		{[]string{"module", "delete", "abcdef0"}, "at least 8"},
		{[]string{"module", "delete", "abcdef0z"}, "at least 8"},
		{[]string{"module", "delete", "abcdef00"}, "no build abcdef00"},
		{[]string{"module", "delete", "abcdef01", "--name", "tanks"}, `under name "tanks"`},
		{[]string{"module", "delete", "abcdef01" + strings.Repeat("1", 57)}, "at least 8"},
		{[]string{"module", "prune", "arena"}, "usage"},
		{[]string{"module", "prune", "arena", "--keep", "0"}, "usage"},
		{[]string{"module", "prune", "--keep", "2"}, "usage"},
	} {
		if _, err := run(bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err = %v, want it to say %q", bad.args, err, bad.want)
		}
	}
	f.modules = append(f.modules, &ludusv1.Module{Name: "other", BuildId: "abcdef01" + strings.Repeat("9", 56), CreatedAt: at})
	if _, err := run("module", "delete", "abcdef01"); err == nil || !strings.Contains(err.Error(), "2 builds start with abcdef01") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if len(f.deletes) != 2 {
		t.Errorf("refused arguments reached the server: %d deletes", len(f.deletes))
	}

	out, err = run("module", "prune", "arena", "--keep", "2")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.prunes) != 1 || f.prunes[0].Name != "arena" || f.prunes[0].Keep != 2 {
		t.Fatalf("prune sent %v", f.prunes)
	}
	for _, want := range []string{"deleted arena build cccccccccccccccc", "kept arena build bbbbbbbbbbbbbbbb: build bbbbbbbbbbbb is in use by live game g2", "1 builds deleted (1 MiB), 1 kept in use"} {
		if !strings.Contains(out, want) {
			t.Errorf("prune output lacks %q:\n%s", want, out)
		}
	}
}
