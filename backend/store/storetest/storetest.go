// Package storetest is the conformance suite of store.Store. Every
// implementation runs it from its own tests:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { ... a fresh, empty store ... })
//	}
//
// newStore must return an empty store and arrange (t.Cleanup) to close it.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Run runs the suite; each subtest gets a fresh store from newStore.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"TenantWithKeysIsAtomic", testTenantWithKeysIsAtomic},
		{"VerbatimStrings", testVerbatimStrings},
		{"APIKeys", testAPIKeys},
		{"Accounts", testAccounts},
		{"AccountsConcurrentCreate", testAccountsConcurrentCreate},
		{"Modules", testModules},
		{"ModulesTenantIsolation", testModulesTenantIsolation},
		{"ModuleBound", testModuleBound},
		{"ModuleDelete", testModuleDelete},
		{"SigningKeys", testSigningKeys},
		{"CanceledContext", testCanceledContext},
		{"APIKeyLifecycle", testAPIKeyLifecycle},
		{"AccountIdentities", testAccountIdentities},
		{"LoginThrottle", testLoginThrottle},
		{"LoginThrottleSweep", testLoginThrottleSweep},
		{"RefreshTokens", testRefreshTokens},
		{"RefreshConcurrentUse", testRefreshConcurrentUse},
		{"RefreshTokenExpiry", testRefreshTokenExpiry},
		{"RefreshTokenExpiryConcurrent", testRefreshTokenExpiryConcurrent},
		{"RefreshReuseMemory", testRefreshReuseMemory},
		{"RefreshFamilyTrim", testRefreshFamilyTrim},
		{"Progression", testProgression},
		{"ProgressionConcurrent", testProgressionConcurrent},
		{"ProgressionCaps", testProgressionCaps},
		{"MatchReportCaps", testMatchReportCaps},
		{"MatchReportCapsConcurrent", testMatchReportCapsConcurrent},
		{"MatchReports", testMatchReports},
		{"MatchReportsConcurrent", testMatchReportsConcurrent},
		{"UnreportedMatchSweep", testUnreportedMatchSweep},
		{"MatchRoster", testMatchRoster},
		{"MatchRosterConcurrent", testMatchRosterConcurrent},
		{"Leaderboard", testLeaderboard},
		{"AccountExportReads", testAccountExportReads},
		{"AccountExportRows", testAccountExportRows},
		{"Webhooks", testWebhooks},
		{"WebhookDeliveryRetention", testWebhookDeliveryRetention},
		{"DeleteAccountCascades", testDeleteAccountCascades},
		{"NastyStringsEverywhere", testNastyStringsEverywhere},
		{"GameArchives", testGameArchives},
		{"BatchResultPages", testBatchResultPages},
		{"BatchSettingsWrites", testBatchSettingsWrites},
		{"BatchRunBytes", testBatchRunBytes},
		{"DeviceSession", testDeviceSession},
		{"DeviceSessionsConcurrent", testDeviceSessionsConcurrent},
		{"ConcurrentWritesIsolated", testConcurrentWritesIsolated},
		{"ResultStats", testResultStats},
		{"ResultRules", testResultRules},
		{"StatBoards", testStatBoards},
		{"Ratings", testRatings},
		{"RatingsConcurrent", testRatingsConcurrent},
		{"Quotas", testQuotas},
		{"Usage", testUsage},
		{"ArchiveBytes", testArchiveBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// base is a fixed time with microseconds, the precision stores keep.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

func id(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func mustTenant(t *testing.T, s store.Store, slug string) store.Tenant {
	t.Helper()
	tn := store.Tenant{ID: id("t_"), Slug: slug, Name: "Tenant " + slug, CreatedAt: base}
	if err := s.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("CreateTenant(%s): %v", slug, err)
	}
	return tn
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func sameTime(a, b time.Time) bool { return a.Equal(b) }

func testTenants(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ts, err := s.ListTenants(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("ListTenants on empty store = %v, %v", ts, err)
	}
	a := store.Tenant{ID: id("t_"), Slug: "alpha", Name: "Alpha Studio", CreatedAt: base}
	b := store.Tenant{ID: id("t_"), Slug: "beta", Name: "Beta", CreatedAt: base.Add(time.Second)}
	must(t, "create a", s.CreateTenant(ctx, a))
	must(t, "create b", s.CreateTenant(ctx, b))

	got, err := s.TenantByID(ctx, a.ID)
	must(t, "TenantByID", err)
	if got.ID != a.ID || got.Slug != a.Slug || got.Name != a.Name || !sameTime(got.CreatedAt, a.CreatedAt) {
		t.Errorf("TenantByID = %+v, want %+v", got, a)
	}
	got, err = s.TenantBySlug(ctx, "beta")
	must(t, "TenantBySlug", err)
	if got.ID != b.ID {
		t.Errorf("TenantBySlug(beta) = %+v", got)
	}
	_, err = s.TenantBySlug(ctx, "gamma")
	wantErr(t, "unknown slug", err, store.ErrNotFound)
	_, err = s.TenantByID(ctx, "t_nope")
	wantErr(t, "unknown id", err, store.ErrNotFound)
	_, err = s.TenantBySlug(ctx, "ALPHA")
	wantErr(t, "slug lookup is exact", err, store.ErrNotFound)

	err = s.CreateTenant(ctx, store.Tenant{ID: id("t_"), Slug: "alpha", Name: "dup", CreatedAt: base})
	wantErr(t, "duplicate slug", err, store.ErrAlreadyExists)
	err = s.CreateTenant(ctx, store.Tenant{ID: a.ID, Slug: "other", Name: "dup", CreatedAt: base})
	wantErr(t, "duplicate id", err, store.ErrAlreadyExists)

	ts, err := s.ListTenants(ctx)
	must(t, "ListTenants", err)
	if len(ts) != 2 || ts[0].ID != a.ID || ts[1].ID != b.ID {
		t.Fatalf("ListTenants = %+v, want [alpha beta]", ts)
	}
}

func testTenantWithKeysIsAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	other := mustTenant(t, s, "other")
	taken := store.APIKey{ID: id("k_"), TenantID: other.ID, Hash: hash("taken"), Scope: "admin", CreatedAt: base}
	must(t, "CreateAPIKey", s.CreateAPIKey(ctx, taken))

	tn := store.Tenant{ID: id("t_"), Slug: "new", Name: "New", CreatedAt: base}
	k := store.APIKey{ID: id("k_"), TenantID: tn.ID, Hash: hash("taken"), Scope: "admin", CreatedAt: base}
	err := s.CreateTenant(ctx, tn, k)
	wantErr(t, "tenant with a duplicate key hash", err, store.ErrAlreadyExists)
	if _, err := s.TenantBySlug(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("tenant exists after its key failed: %v", err)
	}

	k.Hash = hash("fresh")
	must(t, "tenant with key", s.CreateTenant(ctx, tn, k))
	got, err := s.APIKeyByHash(ctx, hash("fresh"))
	must(t, "APIKeyByHash", err)
	if got.TenantID != tn.ID || got.ID != k.ID {
		t.Errorf("key = %+v", got)
	}
}

// nasty strings must come back byte for byte.
var nasty = []string{
	`'; DROP TABLE tenants; --`,
	`" OR 1=1 --`,
	`Robert'); DELETE FROM accounts WHERE ('1'='1`,
	`%_\*?[]`,
	"tab\tnew\nline",
	"ünïcødé 🎮 名前 عربى",
}

func testVerbatimStrings(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, str := range nasty {
		tn := store.Tenant{ID: id("t_"), Slug: fmt.Sprintf("s%d-%s", i, str), Name: str, CreatedAt: base}
		must(t, "create tenant", s.CreateTenant(ctx, tn))
		got, err := s.TenantBySlug(ctx, tn.Slug)
		must(t, "tenant by nasty slug", err)
		if got.Name != str || got.Slug != tn.Slug {
			t.Errorf("tenant round trip: %q -> %q / %q", str, got.Name, got.Slug)
		}
		a := store.Account{ID: id("a_"), TenantID: tn.ID, DeviceID: str, DisplayName: str, CreatedAt: base, UpdatedAt: base}
		must(t, "create account", s.CreateAccount(ctx, a))
		ga, err := s.AccountByDevice(ctx, tn.ID, str)
		must(t, "account by nasty device", err)
		if ga.DisplayName != str || ga.DeviceID != str {
			t.Errorf("account round trip: %q -> %q / %q", str, ga.DisplayName, ga.DeviceID)
		}
		m := store.Module{TenantID: tn.ID, Name: str, BuildID: hex.EncodeToString(hash(str)), MetaName: str, ViewFormat: str, UploadedAt: base}
		_, err = s.PutModule(ctx, m, []byte(str), store.DefaultModuleBound)
		must(t, "put module", err)
		gm, err := s.LatestModule(ctx, tn.ID, str)
		must(t, "latest module by nasty name", err)
		if gm.Name != str || gm.MetaName != str || gm.ViewFormat != str {
			t.Errorf("module round trip: %q -> %+v", str, gm)
		}
	}
	ts, err := s.ListTenants(ctx)
	must(t, "list", err)
	if len(ts) != len(nasty) {
		t.Fatalf("%d tenants after nasty inserts, want %d", len(ts), len(nasty))
	}
}

func testAPIKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "keys")
	k := store.APIKey{ID: id("k_"), TenantID: tn.ID, Hash: hash("secret"), Scope: "admin", CreatedAt: base}
	must(t, "CreateAPIKey", s.CreateAPIKey(ctx, k))
	got, err := s.APIKeyByHash(ctx, hash("secret"))
	must(t, "APIKeyByHash", err)
	if got.ID != k.ID || got.TenantID != tn.ID || got.Scope != "admin" || !bytes.Equal(got.Hash, k.Hash) || !sameTime(got.CreatedAt, base) {
		t.Errorf("APIKeyByHash = %+v, want %+v", got, k)
	}
	_, err = s.APIKeyByHash(ctx, hash("other"))
	wantErr(t, "unknown hash", err, store.ErrNotFound)

	dup := k
	dup.ID = id("k_")
	wantErr(t, "duplicate hash", s.CreateAPIKey(ctx, dup), store.ErrAlreadyExists)
	orphan := store.APIKey{ID: id("k_"), TenantID: "t_missing", Hash: hash("orphan"), Scope: "admin", CreatedAt: base}
	wantErr(t, "key of unknown tenant", s.CreateAPIKey(ctx, orphan), store.ErrNotFound)

	// A tenant holds at most MaxAPIKeysPerTenant keys; revoking one makes
	// room; other tenants are not counted.
	capped := mustTenant(t, s, "keys-cap")
	var last store.APIKey
	for i := range store.MaxAPIKeysPerTenant {
		last = store.APIKey{ID: id("k_"), TenantID: capped.ID, Hash: hash(fmt.Sprint("cap-", i)), Scope: "read-only", CreatedAt: base}
		must(t, "key within the bound", s.CreateAPIKey(ctx, last))
	}
	over := store.APIKey{ID: id("k_"), TenantID: capped.ID, Hash: hash("cap-over"), Scope: "read-only", CreatedAt: base}
	wantErr(t, "a key past the bound", s.CreateAPIKey(ctx, over), store.ErrLimit)
	if _, err := s.APIKeyByHash(ctx, hash("cap-over")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused key was stored: %v", err)
	}
	must(t, "a key of another tenant", s.CreateAPIKey(ctx, store.APIKey{ID: id("k_"), TenantID: tn.ID, Hash: hash("other-tenant"), Scope: "admin", CreatedAt: base}))
	must(t, "revoke one", s.DeleteAPIKey(ctx, capped.ID, last.ID))
	must(t, "a key after a revocation", s.CreateAPIKey(ctx, over))
}

func testAccounts(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustTenant(t, s, "acc-a")
	b := mustTenant(t, s, "acc-b")
	acc := store.Account{ID: id("a_"), TenantID: a.ID, DeviceID: "device-0123456789", DisplayName: "Ada", CreatedAt: base, UpdatedAt: base}
	must(t, "CreateAccount", s.CreateAccount(ctx, acc))

	got, err := s.AccountByDevice(ctx, a.ID, acc.DeviceID)
	must(t, "AccountByDevice", err)
	if got != acc {
		t.Errorf("AccountByDevice = %+v, want %+v", got, acc)
	}
	got, err = s.AccountByID(ctx, a.ID, acc.ID)
	must(t, "AccountByID", err)
	if got != acc {
		t.Errorf("AccountByID = %+v, want %+v", got, acc)
	}

	// Device ids are per tenant.
	_, err = s.AccountByDevice(ctx, b.ID, acc.DeviceID)
	wantErr(t, "device in other tenant", err, store.ErrNotFound)
	_, err = s.AccountByID(ctx, b.ID, acc.ID)
	wantErr(t, "account id in other tenant", err, store.ErrNotFound)
	same := store.Account{ID: id("a_"), TenantID: b.ID, DeviceID: acc.DeviceID, DisplayName: "Bob", CreatedAt: base, UpdatedAt: base}
	must(t, "same device, other tenant", s.CreateAccount(ctx, same))

	dup := acc
	dup.ID = id("a_")
	wantErr(t, "duplicate device", s.CreateAccount(ctx, dup), store.ErrAlreadyExists)
	orphan := store.Account{ID: id("a_"), TenantID: "t_missing", DeviceID: "x", DisplayName: "x", CreatedAt: base, UpdatedAt: base}
	wantErr(t, "account of unknown tenant", s.CreateAccount(ctx, orphan), store.ErrNotFound)

	// Several accounts without a device id may exist.
	for range 2 {
		must(t, "no device", s.CreateAccount(ctx, store.Account{ID: id("a_"), TenantID: a.ID, DisplayName: "x", CreatedAt: base, UpdatedAt: base}))
	}

	later := base.Add(time.Hour)
	must(t, "SetDisplayName", s.SetDisplayName(ctx, a.ID, acc.ID, "Ada L.", later))
	got, _ = s.AccountByID(ctx, a.ID, acc.ID)
	if got.DisplayName != "Ada L." || !sameTime(got.UpdatedAt, later) || !sameTime(got.CreatedAt, base) {
		t.Errorf("after rename = %+v", got)
	}
	wantErr(t, "rename in other tenant", s.SetDisplayName(ctx, b.ID, acc.ID, "x", later), store.ErrNotFound)
	wantErr(t, "rename unknown", s.SetDisplayName(ctx, a.ID, "a_missing", "x", later), store.ErrNotFound)
}

func testAccountsConcurrentCreate(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "race")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateAccount(ctx, store.Account{ID: id("a_"), TenantID: tn.ID, DeviceID: "same-device-000000", DisplayName: "x", CreatedAt: base, UpdatedAt: base})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrAlreadyExists):
			t.Errorf("concurrent create: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent creates succeeded, want 1", ok)
	}
}

func module(tenantID, name string, wasm []byte, at time.Time) store.Module {
	sum := sha256.Sum256(wasm)
	return store.Module{
		TenantID: tenantID, Name: name, BuildID: hex.EncodeToString(sum[:]), ABIVersion: 1, MetaName: "meta-" + name,
		TickRate: 30, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "indexed8", ViewWidth: 160, ViewHeight: 120,
		UploadedAt: at,
	}
}

func testModules(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "mods")
	_, err := s.LatestModule(ctx, tn.ID, "arena")
	wantErr(t, "no module yet", err, store.ErrNotFound)
	if ms, err := s.ListModules(ctx, tn.ID); err != nil || len(ms) != 0 {
		t.Fatalf("ListModules empty = %v, %v", ms, err)
	}

	v1 := []byte("\x00asm v1")
	m1 := module(tn.ID, "arena", v1, base)
	got, err := s.PutModule(ctx, m1, v1, store.DefaultModuleBound)
	must(t, "PutModule v1", err)
	want := m1
	want.SizeBytes, want.CreatedAt = int64(len(v1)), base
	if got != want {
		t.Errorf("PutModule = %+v, want %+v", got, want)
	}
	latest, err := s.LatestModule(ctx, tn.ID, "arena")
	must(t, "LatestModule", err)
	if latest != want {
		t.Errorf("LatestModule = %+v, want %+v", latest, want)
	}
	gm, wasm, err := s.GetModule(ctx, tn.ID, m1.BuildID)
	must(t, "GetModule", err)
	if gm != want || !bytes.Equal(wasm, v1) {
		t.Errorf("GetModule = %+v %q", gm, wasm)
	}

	// A newer build under the same name wins, even with an equal timestamp.
	v2 := bytes.Repeat([]byte("v2"), 100_000)
	m2 := module(tn.ID, "arena", v2, base)
	_, err = s.PutModule(ctx, m2, v2, store.DefaultModuleBound)
	must(t, "PutModule v2", err)
	latest, _ = s.LatestModule(ctx, tn.ID, "arena")
	if latest.BuildID != m2.BuildID || latest.SizeBytes != int64(len(v2)) {
		t.Errorf("latest after v2 = %s, want %s", latest.BuildID, m2.BuildID)
	}
	_, wasm, err = s.GetModule(ctx, tn.ID, m2.BuildID)
	must(t, "GetModule v2", err)
	if !bytes.Equal(wasm, v2) {
		t.Error("v2 bytes differ")
	}

	// Re-uploading v1 (a rollback) makes it the newest again, without a new row.
	again := module(tn.ID, "arena", v1, base.Add(time.Minute))
	got, err = s.PutModule(ctx, again, v1, store.DefaultModuleBound)
	must(t, "PutModule v1 again", err)
	if !sameTime(got.CreatedAt, base) || !sameTime(got.UploadedAt, base.Add(time.Minute)) {
		t.Errorf("re-put times = %v / %v", got.CreatedAt, got.UploadedAt)
	}
	latest, _ = s.LatestModule(ctx, tn.ID, "arena")
	if latest.BuildID != m1.BuildID {
		t.Errorf("latest after rollback = %s, want v1", latest.BuildID)
	}

	// Same bytes under another name.
	_, err = s.PutModule(ctx, module(tn.ID, "arena-copy", v1, base), v1, store.DefaultModuleBound)
	must(t, "PutModule other name", err)
	other, err := s.LatestModule(ctx, tn.ID, "arena-copy")
	must(t, "LatestModule other name", err)
	if other.BuildID != m1.BuildID {
		t.Error("other name has another build")
	}

	ms, err := s.ListModules(ctx, tn.ID)
	must(t, "ListModules", err)
	if len(ms) != 3 {
		t.Fatalf("ListModules = %d entries, want 3: %+v", len(ms), ms)
	}
	if ms[0].Name != "arena-copy" || ms[1].BuildID != m1.BuildID || ms[2].BuildID != m2.BuildID {
		t.Errorf("ListModules order = %s/%s, %s/%s, %s/%s; want newest first",
			ms[0].Name, ms[0].BuildID[:8], ms[1].Name, ms[1].BuildID[:8], ms[2].Name, ms[2].BuildID[:8])
	}

	_, err = s.PutModule(ctx, module("t_missing", "x", v1, base), v1, store.DefaultModuleBound)
	wantErr(t, "module of unknown tenant", err, store.ErrNotFound)
	_, _, err = s.GetModule(ctx, tn.ID, hex.EncodeToString(hash("nothing")))
	wantErr(t, "unknown build", err, store.ErrNotFound)
}

func testModulesTenantIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustTenant(t, s, "iso-a")
	b := mustTenant(t, s, "iso-b")
	wasm := []byte("secret module of a")
	m := module(a.ID, "arena", wasm, base)
	_, err := s.PutModule(ctx, m, wasm, store.DefaultModuleBound)
	must(t, "PutModule", err)

	_, _, err = s.GetModule(ctx, b.ID, m.BuildID)
	wantErr(t, "GetModule across tenants", err, store.ErrNotFound)
	_, err = s.LatestModule(ctx, b.ID, "arena")
	wantErr(t, "LatestModule across tenants", err, store.ErrNotFound)
	if ms, err := s.ListModules(ctx, b.ID); err != nil || len(ms) != 0 {
		t.Errorf("ListModules(b) = %v, %v; want nothing", ms, err)
	}

	// b uploading the same bytes gets its own copy.
	mb := module(b.ID, "arena", wasm, base)
	_, err = s.PutModule(ctx, mb, wasm, store.DefaultModuleBound)
	must(t, "PutModule b", err)
	if ms, _ := s.ListModules(ctx, a.ID); len(ms) != 1 || ms[0].TenantID != a.ID {
		t.Errorf("ListModules(a) = %+v", ms)
	}
}

func testSigningKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ks, err := s.ListSigningKeys(ctx); err != nil || len(ks) != 0 {
		t.Fatalf("ListSigningKeys empty = %v, %v", ks, err)
	}
	k1 := store.SigningKey{ID: "k1", Private: []byte{1, 2, 3}, CreatedAt: base}
	k2 := store.SigningKey{ID: "k2", Private: []byte{4, 5, 6}, CreatedAt: base.Add(time.Second)}
	must(t, "put", s.PutSigningKeys(ctx, k1))
	k1.RetiredAt = k2.CreatedAt
	must(t, "put rotation", s.PutSigningKeys(ctx, k1, k2))

	ks, err := s.ListSigningKeys(ctx)
	must(t, "list", err)
	if len(ks) != 2 {
		t.Fatalf("keys = %+v", ks)
	}
	byID := map[string]store.SigningKey{ks[0].ID: ks[0], ks[1].ID: ks[1]}
	for _, want := range []store.SigningKey{k1, k2} {
		got := byID[want.ID]
		if !bytes.Equal(got.Private, want.Private) || !sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.RetiredAt, want.RetiredAt) || got.RetiredAt.IsZero() != want.RetiredAt.IsZero() {
			t.Errorf("key %s = %+v, want %+v", want.ID, got, want)
		}
	}

	must(t, "delete", s.DeleteSigningKeys(ctx, "k1", "unknown"))
	ks, _ = s.ListSigningKeys(ctx)
	if len(ks) != 1 || ks[0].ID != "k2" {
		t.Errorf("after delete = %+v", ks)
	}
}

func testCanceledContext(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.ListTenants(ctx); err == nil {
		t.Error("ListTenants with canceled context succeeded")
	}
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t_c", Slug: "c", Name: "c", CreatedAt: base}); err == nil {
		t.Error("CreateTenant with canceled context succeeded")
	}
}
