package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// testModuleBound: a build that would take the tenant past its bound, in
// builds or in bytes, is refused with the numbers; putting a build the name
// already has is not a new build; deleting makes room; tenants are apart.
func testModuleBound(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "bound")
	other := mustTenant(t, s, "bound-other")
	bound := store.ModuleBound{Builds: 3, Bytes: 100}
	put := func(tenantID, name, body string) error {
		_, err := s.PutModule(ctx, module(tenantID, name, []byte(body), base), []byte(body), bound)
		return err
	}
	must(t, "build 1", put(tn.ID, "arena", "build-1-20-bytes----"))
	must(t, "build 2", put(tn.ID, "arena", "build-2-20-bytes----"))
	// The same bytes under another name are another stored copy.
	must(t, "build 1 as other name", put(tn.ID, "arena-copy", "build-1-20-bytes----"))

	err := put(tn.ID, "arena", "build-4")
	wantErr(t, "a fourth build", err, store.ErrLimit)
	var le *store.ModuleLimitError
	if !errors.As(err, &le) || le.Builds != 3 || le.Bytes != 60 || le.Bound != bound {
		t.Errorf("limit error = %#v, want 3 builds, 60 bytes, bound %+v", le, bound)
	}
	// At the bound, putting a build the name has again is allowed (and makes
	// it the newest).
	_, err = s.PutModule(ctx, module(tn.ID, "arena", []byte("build-1-20-bytes----"), base.Add(time.Minute)), []byte("build-1-20-bytes----"), bound)
	must(t, "re-put of a stored build at the bound", err)
	if ms, _ := s.ListModules(ctx, tn.ID); len(ms) != 3 {
		t.Errorf("after re-put: %d builds stored, want 3", len(ms))
	}
	if l, _ := s.LatestModule(ctx, tn.ID, "arena"); l.BuildID != module(tn.ID, "", []byte("build-1-20-bytes----"), base).BuildID {
		t.Errorf("re-put build is not the newest: %s", l.BuildID)
	}
	// Another tenant has its own bound.
	must(t, "other tenant", put(other.ID, "arena", "build-4"))

	// Deleting makes room; then the bytes bound bites.
	b2 := module(tn.ID, "arena", []byte("build-2-20-bytes----"), base).BuildID
	_, err = s.DeleteModule(ctx, tn.ID, b2, "")
	must(t, "delete build 2", err)
	must(t, "build 4 after a delete", put(tn.ID, "arena", "build-4-20-bytes----"))
	_, err = s.DeleteModule(ctx, tn.ID, module(tn.ID, "", []byte("build-4-20-bytes----"), base).BuildID, "")
	must(t, "delete build 4", err)
	big := string(make([]byte, 61)) // 40 stored + 61 > 100
	err = put(tn.ID, "arena", big)
	wantErr(t, "a build past the bytes bound", err, store.ErrLimit)
	if !errors.As(err, &le) || le.Builds != 2 || le.Bytes != 40 {
		t.Errorf("bytes limit error = %#v, want 2 builds, 40 bytes", le)
	}
	must(t, "a build that just fits", put(tn.ID, "arena", big[:60]))
	wantErr(t, "unknown tenant", put("t_missing", "arena", "x"), store.ErrNotFound)
}

// testModuleDelete: a build goes under one name or every name, the name's
// previous build becomes its newest, and unknown builds (or another tenant's)
// are ErrNotFound.
func testModuleDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "del")
	other := mustTenant(t, s, "del-other")
	v1, v2 := []byte("delete v1"), []byte("delete v2")
	m1, m2 := module(tn.ID, "arena", v1, base), module(tn.ID, "arena", v2, base.Add(time.Second))
	for _, p := range []struct {
		m    store.Module
		wasm []byte
	}{{m1, v1}, {m2, v2}, {module(tn.ID, "arena-copy", v2, base), v2}, {module(other.ID, "arena", v2, base), v2}} {
		_, err := s.PutModule(ctx, p.m, p.wasm, store.DefaultModuleBound)
		must(t, "put", err)
	}

	_, err := s.DeleteModule(ctx, tn.ID, hashHex("no such build"), "")
	wantErr(t, "unknown build", err, store.ErrNotFound)
	_, err = s.DeleteModule(ctx, tn.ID, m1.BuildID, "arena-copy")
	wantErr(t, "build not under that name", err, store.ErrNotFound)
	other1 := module(other.ID, "arena", v1, base)
	_, err = s.DeleteModule(ctx, other.ID, other1.BuildID, "")
	wantErr(t, "another tenant's build", err, store.ErrNotFound)

	// Under one name: the other name keeps its copy.
	del, err := s.DeleteModule(ctx, tn.ID, m2.BuildID, "arena")
	must(t, "delete v2 from arena", err)
	if len(del) != 1 || del[0].Name != "arena" || del[0].BuildID != m2.BuildID || del[0].SizeBytes != int64(len(v2)) {
		t.Errorf("deleted = %+v", del)
	}
	if l, err := s.LatestModule(ctx, tn.ID, "arena"); err != nil || l.BuildID != m1.BuildID {
		t.Errorf("arena's newest after deleting v2 = %s, %v; want v1", l.BuildID, err)
	}
	if _, _, err := s.GetModule(ctx, tn.ID, m2.BuildID); err != nil {
		t.Errorf("v2 still under arena-copy: GetModule = %v", err)
	}
	// Under every name.
	del, err = s.DeleteModule(ctx, tn.ID, m2.BuildID, "")
	must(t, "delete v2 everywhere", err)
	if len(del) != 1 || del[0].Name != "arena-copy" {
		t.Errorf("deleted = %+v", del)
	}
	_, _, err = s.GetModule(ctx, tn.ID, m2.BuildID)
	wantErr(t, "GetModule of a deleted build", err, store.ErrNotFound)
	_, err = s.LatestModule(ctx, tn.ID, "arena-copy")
	wantErr(t, "a name with no build left", err, store.ErrNotFound)
	// The other tenant's copy of the same bytes stays.
	if _, _, err := s.GetModule(ctx, other.ID, m2.BuildID); err != nil {
		t.Errorf("other tenant's copy: %v", err)
	}
	_, err = s.DeleteModule(ctx, tn.ID, m2.BuildID, "")
	wantErr(t, "deleting twice", err, store.ErrNotFound)
}

func hashHex(s string) string { return fmt.Sprintf("%x", hash(s)) }

// ModuleBoundAcrossStores checks that concurrent puts through separate
// stores on one database (as separate backend processes would make) cannot
// together take a tenant past its bound. open returns a new store on the
// same database each call.
func ModuleBoundAcrossStores(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	stores := []store.Store{open(t), open(t), open(t), open(t)}
	const builds = 5
	bound := store.ModuleBound{Builds: builds, Bytes: 1 << 20}
	for round := range 10 {
		tn := mustTenant(t, stores[0], fmt.Sprintf("across-%d", round))
		for i := range builds - 1 {
			body := []byte(fmt.Sprintf("round %d build %d", round, i))
			_, err := stores[0].PutModule(ctx, module(tn.ID, "arena", body, base), body, bound)
			must(t, "fill", err)
		}
		// Eight puts race for the last slot, two through each store.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		start := make(chan struct{})
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := []byte(fmt.Sprintf("round %d racer %d", round, i))
				<-start
				_, errs[i] = stores[i%len(stores)].PutModule(ctx, module(tn.ID, "arena", body, base), body, bound)
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, store.ErrLimit):
				t.Fatalf("round %d: racing put: %v", round, err)
			}
		}
		ms, err := stores[0].ListModules(ctx, tn.ID)
		must(t, "list", err)
		if ok != 1 || len(ms) != builds {
			t.Fatalf("round %d: %d racing puts for the last slot succeeded and %d builds are stored; want 1 and %d", round, ok, len(ms), builds)
		}
	}
}
