package backend_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func buildOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func moduleBound(b store.ModuleBound) option {
	return func(c *backend.Config) { backend.SetModuleBound(c, b) }
}

func (e *env) upload(adminKey, name string, wasm []byte) (*ludusv1.Module, error) {
	resp, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: name, Wasm: wasm}, adminKey))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Module, nil
}

func (e *env) mustUpload(adminKey, name string, wasm []byte) *ludusv1.Module {
	e.t.Helper()
	m, err := e.upload(adminKey, name, wasm)
	if err != nil {
		e.t.Fatalf("UploadModule(%s): %v", name, err)
	}
	return m
}

// TestModuleBoundRefusesUploads: an upload that would take the tenant past
// its bound on stored builds is ResourceExhausted, saying how many it has,
// the bound and what to do; uploading a build the name has already is not
// a new build; deleting one makes room. Both stores.
func TestModuleBoundRefusesUploads(t *testing.T) {
	bothStores(t, func(t *testing.T, e *env) {
		_, admin := e.createTenant("bound")
		for i := range 3 {
			e.mustUpload(admin, "arena", wasm(fmt.Sprint("build ", i)))
		}
		_, err := e.upload(admin, "arena", wasm("build 3"))
		wantCode(t, err, connect.CodeResourceExhausted, "stores 3 module builds", "most it may is 3 builds and 1 KiB", "DeleteModule")
		// The same build again (a rollback) is not a new build.
		if m := e.mustUpload(admin, "arena", wasm("build 0")); m.BuildId != buildOf(wasm("build 0")) {
			t.Fatalf("re-upload = %s", m.BuildId)
		}
		list, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, admin))
		if err != nil || len(list.Msg.Modules) != 3 || list.Msg.MaxBuilds != 3 || list.Msg.MaxBytes != 1024 {
			t.Fatalf("ListModules = %v, %v", list, err)
		}
		if _, err := e.admin.DeleteModule(ctx, req(&ludusv1.DeleteModuleRequest{BuildId: buildOf(wasm("build 1"))}, admin)); err != nil {
			t.Fatal(err)
		}
		e.mustUpload(admin, "arena", wasm("build 3"))

		// Bytes: 3 builds of 15 bytes stored; 1024 - 45 left.
		_, err = e.upload(admin, "big", wasm(strings.Repeat("x", 1024-45-7)))
		wantCode(t, err, connect.CodeResourceExhausted, "(45 B)")
	}, moduleBound(store.ModuleBound{Builds: 3, Bytes: 1024}))
}

// TestDefaultModuleBound: without a bound given, the backend enforces
// store.DefaultModuleBound.
func TestDefaultModuleBound(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("default-bound")
	list, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if list.Msg.MaxBuilds != store.MaxModuleBuildsPerTenant || list.Msg.MaxBytes != store.MaxModuleBytesPerTenant {
		t.Fatalf("bound = %d builds, %d bytes", list.Msg.MaxBuilds, list.Msg.MaxBytes)
	}
	for i := range store.MaxModuleBuildsPerTenant {
		e.mustUpload(admin, "ci", wasm(fmt.Sprint("commit ", i)))
	}
	_, err = e.upload(admin, "ci", wasm("one commit too many"))
	wantCode(t, err, connect.CodeResourceExhausted, "200 builds and 2 GiB")
}

// TestDeleteModule: who may delete, bad requests, unknown builds, and what
// a deletion does to the names and the module store.
func TestDeleteModule(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("del")
	other, otherAdmin := e.createTenant("del-other")
	v1 := e.mustUpload(admin, "arena", wasm("v1"))
	v2 := e.mustUpload(admin, "arena", wasm("v2"))
	e.mustUpload(admin, "arena-copy", wasm("v2"))
	theirs := e.mustUpload(otherAdmin, "arena", wasm("theirs"))
	del := func(key, build, name string) (*ludusv1.DeleteModuleResponse, error) {
		resp, err := e.admin.DeleteModule(ctx, req(&ludusv1.DeleteModuleRequest{BuildId: build, Name: name}, key))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	_, err := del("", v1.BuildId, "")
	wantCode(t, err, connect.CodeUnauthenticated)
	for _, scope := range []string{"read-only", "server"} {
		_, err = del(e.apiKey(admin, scope), v1.BuildId, "")
		wantCode(t, err, connect.CodePermissionDenied, `DeleteModule needs a key with scope "admin"`)
	}
	_, err = del(operatorKey, v1.BuildId, "")
	wantCode(t, err, connect.CodePermissionDenied, "operator key")

	for _, bad := range []struct{ build, name string }{
		{"", ""}, {"abc", ""}, {strings.ToUpper(v1.BuildId), ""}, {v1.BuildId + "00", ""},
		{v1.BuildId, "Arena"}, {v1.BuildId, strings.Repeat("a", 65)}, {v1.BuildId, "a/b"},
	} {
		_, err = del(admin, bad.build, bad.name)
		wantCode(t, err, connect.CodeInvalidArgument)
	}
	_, err = del(admin, buildOf([]byte("never uploaded")), "")
	wantCode(t, err, connect.CodeNotFound, "no such module build")
	_, err = del(admin, theirs.BuildId, "")
	wantCode(t, err, connect.CodeNotFound)
	_, err = del(admin, v1.BuildId, "arena-copy")
	wantCode(t, err, connect.CodeNotFound, `under name "arena-copy"`)

	// From one name: the other keeps the build, and arena's newest is v1 again.
	out, err := del(admin, v2.BuildId, "arena")
	if err != nil || len(out.Deleted) != 1 || out.Deleted[0].Name != "arena" {
		t.Fatalf("delete v2 from arena = %v, %v", out, err)
	}
	tenant := tn.Id
	res, err := e.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tenant, Name: "arena"}, clusterToken))
	if err != nil || res.Msg.Module.BuildId != v1.BuildId {
		t.Fatalf("arena resolves to %v, %v; want v1", res, err)
	}
	if _, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tenant, BuildId: v2.BuildId}, clusterToken)); err != nil {
		t.Fatalf("v2 still under arena-copy: %v", err)
	}
	// From every name: gone.
	if out, err = del(admin, v2.BuildId, ""); err != nil || len(out.Deleted) != 1 {
		t.Fatalf("delete v2 = %v, %v", out, err)
	}
	_, err = e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tenant, BuildId: v2.BuildId}, clusterToken))
	wantCode(t, err, connect.CodeNotFound)
	// An archived game of a deleted build cannot be replayed from the
	// backend, and the error says what to do.
	_, _, err = e.srv.TenantBuild(ctx, tenant, v2.BuildId)
	wantCode(t, err, connect.CodeNotFound, "deleted (DeleteModule)", "--wasm FILE")
	// The other tenant's build is untouched.
	if _, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: other.Id, BuildId: theirs.BuildId}, clusterToken)); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteModuleInUse: a build a live game or an unfinished batch run
// uses is refused (FailedPrecondition naming them), whether deleted from
// every name or one; so is one a finished game not yet archived uses (its
// result may be read again by replay); an archived game does not hold it;
// without a fleet
// view, or with the fleet unreadable, nothing is deleted (Unavailable).
func TestDeleteModuleInUse(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("inuse")
	m := e.mustUpload(admin, "arena", wasm("live"))
	e.mustUpload(admin, "arena", wasm("newer"))
	del := func(name string) error {
		_, err := e.admin.DeleteModule(ctx, req(&ludusv1.DeleteModuleRequest{BuildId: m.BuildId, Name: name}, admin))
		return err
	}

	e.fleet.set([]*ludusv1.GameInfo{
		{GameId: "g_live", BuildId: m.BuildId, State: "running"},
		{GameId: "g_starting", BuildId: m.BuildId, State: ""},
		{GameId: "g_done", BuildId: m.BuildId, State: "ended"},
	}, map[string]string{"r_batch": m.BuildId, "r_other": buildOf([]byte("x"))})
	err := del("")
	wantCode(t, err, connect.CodeFailedPrecondition, "live game g_live", "live game g_starting", "game g_done (ended, not yet archived)",
		"batch run r_batch", "takes the game over")
	if strings.Contains(err.Error(), "r_other") {
		t.Errorf("refusal names what does not use the build: %v", err)
	}
	wantCode(t, del("arena"), connect.CodeFailedPrecondition)

	e.fleet.set(nil, map[string]string{"r_batch": m.BuildId})
	wantCode(t, del(""), connect.CodeFailedPrecondition, "batch run r_batch")

	// A failed game not yet archived may have its result read again by
	// replaying its log on the build.
	e.fleet.set([]*ludusv1.GameInfo{{GameId: "g_done", BuildId: m.BuildId, State: "failed"}}, nil)
	wantCode(t, del(""), connect.CodeFailedPrecondition, "game g_done (failed, not yet archived)")
	e.fleet.err = errors.New("etcd down")
	wantCode(t, del(""), connect.CodeUnavailable, "fleet state is unavailable")
	e.fleet.err = nil
	e.fleet.set(nil, nil) // archived: the games left etcd
	if err := del(""); err != nil {
		t.Fatalf("a build only archived games ran: %v", err)
	}

	// A backend with no fleet view cannot check, so it refuses.
	noFleet := newEnv(t, func(c *backend.Config) { c.Fleet = nil })
	_, admin2 := noFleet.createTenant("nofleet")
	m2 := noFleet.mustUpload(admin2, "arena", wasm("x"))
	_, err = noFleet.admin.DeleteModule(ctx, req(&ludusv1.DeleteModuleRequest{BuildId: m2.BuildId}, admin2))
	wantCode(t, err, connect.CodeUnavailable, "no view of the fleet")
	if list, _ := noFleet.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, admin2)); len(list.Msg.Modules) != 1 {
		t.Error("a refused delete deleted")
	}
}

// TestPruneModules keeps a name's newest builds and those in use, and
// deletes the rest; other names are untouched.
func TestPruneModules(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("prune")
	var builds []*ludusv1.Module // oldest first
	for i := range 6 {
		builds = append(builds, e.mustUpload(admin, "arena", wasm(fmt.Sprint("arena ", i))))
	}
	keepName := e.mustUpload(admin, "other", wasm("arena 0")) // same bytes as the oldest, another name
	e.fleet.set([]*ludusv1.GameInfo{{GameId: "g_old", BuildId: builds[1].BuildId, State: "running"}}, nil)

	prune := func(key, name string, keep int32) (*ludusv1.PruneModulesResponse, error) {
		resp, err := e.admin.PruneModules(ctx, req(&ludusv1.PruneModulesRequest{Name: name, Keep: keep}, key))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	_, err := prune(e.apiKey(admin, "read-only"), "arena", 2)
	wantCode(t, err, connect.CodePermissionDenied)
	for _, bad := range []struct {
		name string
		keep int32
	}{{"arena", 0}, {"arena", -1}, {"arena", 1001}, {"", 2}, {"Arena", 2}} {
		_, err = prune(admin, bad.name, bad.keep)
		wantCode(t, err, connect.CodeInvalidArgument)
	}

	out, err := prune(admin, "arena", 2)
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, m := range out.Deleted {
		deleted = append(deleted, m.BuildId)
	}
	want := []string{builds[3].BuildId, builds[2].BuildId, builds[0].BuildId}
	if fmt.Sprint(deleted) != fmt.Sprint(want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	if len(out.Kept) != 1 || out.Kept[0].BuildId != builds[1].BuildId || !strings.Contains(out.Kept[0].Reason, "live game g_old") {
		t.Errorf("kept = %v", out.Kept)
	}
	list, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, admin))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, m := range list.Msg.Modules {
		left = append(left, m.Name+"/"+m.BuildId[:6])
	}
	wantLeft := []string{"other/" + keepName.BuildId[:6], "arena/" + builds[5].BuildId[:6], "arena/" + builds[4].BuildId[:6], "arena/" + builds[1].BuildId[:6]}
	if fmt.Sprint(left) != fmt.Sprint(wantLeft) {
		t.Errorf("left %v, want %v", left, wantLeft)
	}
	// Nothing more to prune; an unknown name has nothing either.
	for _, name := range []string{"arena", "nothing"} {
		if out, err := prune(admin, name, 2); err != nil || len(out.Deleted) != 0 {
			t.Errorf("prune %s again = %v, %v", name, out, err)
		}
	}
}
