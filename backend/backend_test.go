package backend_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlite"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

const device = "device-0123456789abcdef"

func TestGuestLogin(t *testing.T) {
	e := newEnv(t)
	e.createTenant("demo")
	ctx := context.Background()

	first := e.guestLogin("demo", device, "Ada")
	if first.Ticket == "" || first.AccountId == "" || first.DisplayName != "Ada" {
		t.Fatalf("first login = %+v", first)
	}
	if want := e.clock.Now().Add(auth.TicketTTL); !first.ExpiresAt.AsTime().Equal(want) {
		t.Errorf("expires_at = %v, want %v", first.ExpiresAt.AsTime(), want)
	}

	// Same device: same account, fresh ticket; no name keeps the name.
	e.clock.Add(time.Second)
	again := e.guestLogin("demo", device, "")
	if again.AccountId != first.AccountId || again.DisplayName != "Ada" || again.Ticket == first.Ticket {
		t.Errorf("second login = %+v", again)
	}
	// A new name renames.
	renamed := e.guestLogin("demo", device, "  Ada Lovelace ")
	if renamed.AccountId != first.AccountId || renamed.DisplayName != "Ada Lovelace" {
		t.Errorf("renamed = %+v", renamed)
	}

	// Another device: another account; no name: a stable generated one.
	other := e.guestLogin("demo", "another-device-000000", "")
	if other.AccountId == first.AccountId {
		t.Error("two devices share an account")
	}
	if !regexp.MustCompile(`^guest-[0-9a-f]{4}$`).MatchString(other.DisplayName) {
		t.Errorf("generated name = %q", other.DisplayName)
	}
	if again := e.guestLogin("demo", "another-device-000000", ""); again.DisplayName != other.DisplayName {
		t.Errorf("generated name changed: %q -> %q", other.DisplayName, again.DisplayName)
	}
	if !regexp.MustCompile(`^a_[a-z2-7]{26}$`).MatchString(first.AccountId) {
		t.Errorf("account id %q is not a_ + 26 base32 characters", first.AccountId)
	}

	// Same device id in another tenant is another account.
	e.createTenant("other")
	if o := e.guestLogin("other", device, ""); o.AccountId == first.AccountId {
		t.Error("device id shared across tenants")
	}

	login := func(tenant, dev, name string) error {
		_, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: tenant, DeviceId: dev, DisplayName: name}))
		return err
	}
	wantCode(t, login("nope", device, ""), connect.CodeNotFound, `unknown tenant "nope"`)
	wantCode(t, login("", device, ""), connect.CodeInvalidArgument, "tenant must be")
	wantCode(t, login("demo", "short", ""), connect.CodeInvalidArgument, "device_id must be 16..128 characters", "got 5 characters")
	wantCode(t, login("demo", strings.Repeat("x", 129), ""), connect.CodeInvalidArgument, "device_id must be")
	wantCode(t, login("demo", "has spaces in it 0123", ""), connect.CodeInvalidArgument, "device_id must be")
	wantCode(t, login("demo", "device'; DROP TABLE x", ""), connect.CodeInvalidArgument, "device_id must be")
	wantCode(t, login("demo", device, strings.Repeat("é", 33)), connect.CodeInvalidArgument, "display_name must be at most 32 characters")
	wantCode(t, login("demo", device, "bell\a"), connect.CodeInvalidArgument, "printable", "U+0007")
	wantCode(t, login("demo", device, "rtl\u202eoverride"), connect.CodeInvalidArgument, "printable")
	// 32 runes of multi-byte text is fine.
	if r := e.guestLogin("demo", device, strings.Repeat("é", 32)); r.DisplayName != strings.Repeat("é", 32) {
		t.Errorf("32-rune name = %q", r.DisplayName)
	}
}

func TestTicketVerifiesThroughJWKS(t *testing.T) {
	e := newEnv(t)
	tn, _ := e.createTenant("demo")
	login := e.guestLogin("demo", device, "Ada")

	client := auth.NewJWKSClient(e.jwksURL(), auth.WithHTTPClient(e.http.Client()), auth.WithClock(e.clock.Now))
	claims, err := auth.NewVerifier(client, e.clock.Now).Verify(context.Background(), login.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	if claims.TenantID != tn.Id || claims.TenantSlug != "demo" || claims.AccountID != login.AccountId || claims.DisplayName != "Ada" {
		t.Errorf("claims = %+v", claims)
	}
	if !claims.ExpiresAt.Equal(login.ExpiresAt.AsTime()) {
		t.Errorf("exp %v != expires_at %v", claims.ExpiresAt, login.ExpiresAt.AsTime())
	}

	// The endpoint itself.
	resp, err := e.http.Client().Get(e.jwksURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "public, max-age=60" ||
		resp.Header.Get("Content-Type") != "application/jwk-set+json" {
		t.Errorf("jwks response: %d %v", resp.StatusCode, resp.Header)
	}
	if _, err := auth.ParseJWKS(body); err != nil {
		t.Errorf("jwks body: %v", err)
	}
	post, err := e.http.Client().Post(e.jwksURL(), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST jwks = %d", post.StatusCode)
	}

	// The in-process verifier agrees.
	if _, err := e.srv.Verifier().Verify(context.Background(), login.Ticket); err != nil {
		t.Fatal(err)
	}
}

func TestKeysSurviveRestart(t *testing.T) {
	e := newEnv(t)
	e.createTenant("demo")
	ctx := context.Background()
	old := e.guestLogin("demo", device, "")
	kid, _ := e.srv.KeySet().Current()

	e.restart()
	if k, _ := e.srv.KeySet().Current(); k.ID != kid.ID {
		t.Fatalf("current key after restart = %s, want %s", k.ID, kid.ID)
	}
	verify := func(ticket string) error {
		client := auth.NewJWKSClient(e.jwksURL(), auth.WithHTTPClient(e.http.Client()), auth.WithClock(e.clock.Now))
		_, err := auth.NewVerifier(client, e.clock.Now).Verify(ctx, ticket)
		return err
	}
	if err := verify(old.Ticket); err != nil {
		t.Fatalf("ticket from before the restart: %v", err)
	}

	// Rotate, restart: tickets of both keys verify; new ones use the new key.
	e.clock.Add(10 * time.Second)
	newKid, err := e.srv.RotateSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.restart()
	if k, _ := e.srv.KeySet().Current(); k.ID != newKid {
		t.Fatalf("current after rotate+restart = %s, want %s", k.ID, newKid)
	}
	fresh := e.guestLogin("demo", device, "")
	for _, tok := range []string{old.Ticket, fresh.Ticket} {
		if err := verify(tok); err != nil {
			t.Fatalf("after rotate+restart: %v", err)
		}
	}

	// Once every ticket of the old key expired, a restart prunes it.
	e.clock.Add(auth.KeyRetention)
	e.restart()
	if keys := e.srv.KeySet().Keys(); len(keys) != 1 || keys[0].ID != newKid {
		t.Fatalf("keys after retention = %+v", keys)
	}
	stored, err := e.store.ListSigningKeys(ctx)
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored keys = %+v, %v", stored, err)
	}
	if err := verify(old.Ticket); err == nil {
		t.Fatal("expired ticket verified")
	}
}

func TestAdminAuthentication(t *testing.T) {
	e := newEnv(t)
	_, keyA := e.createTenant("alpha")
	ctx := context.Background()
	if !regexp.MustCompile(`^lds_[A-Za-z0-9_-]{43}$`).MatchString(keyA) {
		t.Errorf("admin key %q is not lds_ + 43 base64url characters", keyA)
	}

	_, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, ""))
	wantCode(t, err, connect.CodeUnauthenticated, "missing API key")
	_, err = e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, "lds_unknown"))
	wantCode(t, err, connect.CodeUnauthenticated, "unknown API key")
	_, err = e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, "something-else"))
	wantCode(t, err, connect.CodeUnauthenticated, "unknown API key")
	basic := connect.NewRequest(&ludusv1.ListModulesRequest{})
	basic.Header().Set("Authorization", "Basic "+keyA)
	_, err = e.admin.ListModules(ctx, basic)
	wantCode(t, err, connect.CodeUnauthenticated, "missing API key")
	_, err = e.admin.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: "x1"}, ""))
	wantCode(t, err, connect.CodeUnauthenticated)
	_, err = e.admin.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: "x1"}, operatorKey+"x"))
	wantCode(t, err, connect.CodeUnauthenticated)

	// A tenant key cannot manage tenants.
	_, err = e.admin.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: "x1"}, keyA))
	wantCode(t, err, connect.CodePermissionDenied, "operator key")
	_, err = e.admin.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, keyA))
	wantCode(t, err, connect.CodePermissionDenied, "operator key")
	// The operator key is not a tenant key.
	_, err = e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: wasm("a")}, operatorKey))
	wantCode(t, err, connect.CodePermissionDenied, "tenant's API key")
	// Case-insensitive scheme works.
	lower := connect.NewRequest(&ludusv1.ListModulesRequest{})
	lower.Header().Set("Authorization", "bearer "+keyA)
	if _, err := e.admin.ListModules(ctx, lower); err != nil {
		t.Errorf("lowercase bearer: %v", err)
	}

	// Operator key disabled.
	e2 := newEnv(t, func(c *backend.Config) { c.OperatorKey = "" })
	_, err = e2.admin.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, operatorKey))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestCreateTenant(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	create := func(slug, name string) (*ludusv1.CreateTenantResponse, error) {
		r, err := e.admin.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: slug, Name: name}, operatorKey))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	r, err := create("my-studio-2", "My Studio")
	if err != nil {
		t.Fatal(err)
	}
	if r.Tenant.Slug != "my-studio-2" || r.Tenant.Name != "My Studio" || !strings.HasPrefix(r.Tenant.Id, "t_") ||
		!r.Tenant.CreatedAt.AsTime().Equal(e.clock.Now()) {
		t.Errorf("tenant = %+v", r.Tenant)
	}
	_, err = create("my-studio-2", "again")
	wantCode(t, err, connect.CodeAlreadyExists, `"my-studio-2" is taken`)
	for _, bad := range []string{"", "a", strings.Repeat("a", 33), "Caps", "under_score", "dot.ted", "spa ce", "ünï"} {
		_, err := create(bad, "")
		wantCode(t, err, connect.CodeInvalidArgument, "slug must be 2..32 characters")
	}
	_, err = create("ok-name", strings.Repeat("n", 65))
	wantCode(t, err, connect.CodeInvalidArgument, "name must be at most 64")
	r2, err := create("no-name", "")
	if err != nil || r2.Tenant.Name != "no-name" {
		t.Errorf("empty name: %+v, %v", r2, err)
	}
	if r2.AdminKey == r.AdminKey {
		t.Error("two tenants got the same key")
	}

	list, err := e.admin.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, operatorKey))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.Tenants) != 2 || list.Msg.Tenants[0].Slug != "my-studio-2" || list.Msg.Tenants[1].Slug != "no-name" {
		t.Errorf("ListTenants = %v", list.Msg.Tenants)
	}
	// The returned key works for its tenant.
	if _, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, r.AdminKey)); err != nil {
		t.Errorf("new admin key: %v", err)
	}
}

func TestUploadModule(t *testing.T) {
	e := newEnv(t)
	_, key := e.createTenant("demo")
	ctx := context.Background()
	upload := func(name string, b []byte) (*ludusv1.Module, error) {
		r, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: name, Wasm: b}, key))
		if err != nil {
			return nil, err
		}
		return r.Msg.Module, nil
	}
	b := wasm("arena v1")
	m, err := upload("arena", b)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if m.BuildId != hex.EncodeToString(sum[:]) || m.Name != "arena" || m.AbiVersion != 1 || m.TickRate != 30 ||
		m.MaxPlayers != 8 || m.ViewFormat != "indexed8" || m.SizeBytes != int64(len(b)) || !m.CreatedAt.AsTime().Equal(e.clock.Now()) {
		t.Errorf("module = %+v", m)
	}

	_, err = upload("arena", []byte("garbage bytes"))
	wantCode(t, err, connect.CodeInvalidArgument, "module rejected: not a WebAssembly module: bad magic number")
	_, err = upload("arena", wasm("bad-meta"))
	wantCode(t, err, connect.CodeInvalidArgument, "module rejected: ludus_meta: tick_rate must be 1..240")
	_, err = upload("arena", nil)
	wantCode(t, err, connect.CodeInvalidArgument, "wasm is empty")
	_, err = upload(strings.Repeat("a", 65), b)
	wantCode(t, err, connect.CodeInvalidArgument, "module name must be 1..64")
	_, err = upload("", b)
	wantCode(t, err, connect.CodeInvalidArgument, "module name must be")
	_, err = upload("Arena!", b)
	wantCode(t, err, connect.CodeInvalidArgument, "module name must be")
	_, err = upload("a'; DROP TABLE modules; --", b)
	wantCode(t, err, connect.CodeInvalidArgument, "module name must be")
	if _, err := upload(strings.Repeat("a", 64), b); err != nil {
		t.Errorf("64-char name: %v", err)
	}
	if _, err := upload("snake_case-name", b); err != nil {
		t.Errorf("name with _ and -: %v", err)
	}

	ms, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, key))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms.Msg.Modules) != 3 {
		t.Errorf("ListModules = %d modules, want 3", len(ms.Msg.Modules))
	}
}

func TestUploadSizeLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 32+ MiB")
	}
	e := newEnv(t)
	_, key := e.createTenant("demo")
	ctx := context.Background()
	big := wasm(string(make([]byte, backend.MaxModuleBytes-8+1)))
	_, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "big", Wasm: big}, key))
	wantCode(t, err, connect.CodeInvalidArgument, "the limit is 33554432 (32 MiB)")

	// Exactly 32 MiB is accepted and served back whole.
	big = big[:backend.MaxModuleBytes]
	r, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "big", Wasm: big}, key))
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := e.store.TenantBySlug(ctx, "demo")
	got, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tn.ID, BuildId: r.Msg.Module.BuildId}, clusterToken))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Msg.Wasm, big) {
		t.Error("32 MiB module not served back intact")
	}

	// Beyond the message limit, Connect refuses to read it.
	huge := wasm(string(make([]byte, backend.MaxRequestBytes)))
	_, err = e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "huge", Wasm: huge}, key))
	wantCode(t, err, connect.CodeResourceExhausted)
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	tnA, keyA := e.createTenant("alpha")
	tnB, keyB := e.createTenant("beta")
	ctx := context.Background()
	b := wasm("alpha's secret game")
	up, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: b}, keyA))
	if err != nil {
		t.Fatal(err)
	}
	build := up.Msg.Module.BuildId

	// B sees nothing of A's.
	ms, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, keyB))
	if err != nil || len(ms.Msg.Modules) != 0 {
		t.Fatalf("B's ListModules = %v, %v", ms.Msg.GetModules(), err)
	}
	ms, err = e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, keyA))
	if err != nil || len(ms.Msg.Modules) != 1 || ms.Msg.Modules[0].BuildId != build {
		t.Fatalf("A's ListModules = %v, %v", ms.Msg.GetModules(), err)
	}

	_, err = e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tnB.Id, BuildId: build}, clusterToken))
	wantCode(t, err, connect.CodeNotFound, "has no module build")
	_, err = e.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tnB.Id, Name: "arena"}, clusterToken))
	wantCode(t, err, connect.CodeNotFound, `has no module named "arena"`)

	got, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tnA.Id, BuildId: build}, clusterToken))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Msg.Wasm, b) || got.Msg.Module.BuildId != build {
		t.Error("GetModule returned other bytes")
	}

	// ResolveModule returns the newest build under a name.
	b2 := wasm("alpha's game v2")
	up2, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: b2}, keyA))
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tnA.Id, Name: "arena"}, clusterToken))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Module.BuildId != up2.Msg.Module.BuildId {
		t.Errorf("resolved %s, want newest %s", res.Msg.Module.BuildId, up2.Msg.Module.BuildId)
	}

	_, err = e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tnA.Id, BuildId: "../etc/passwd"}, clusterToken))
	wantCode(t, err, connect.CodeInvalidArgument, "build_id must be 64 lowercase hex")
	_, err = e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{BuildId: build}, clusterToken))
	wantCode(t, err, connect.CodeInvalidArgument, "tenant_id")
}

func TestModuleStoreAuthentication(t *testing.T) {
	e := newEnv(t)
	tn, key := e.createTenant("demo")
	ctx := context.Background()
	r := &clusterv1.ResolveModuleRequest{TenantId: tn.Id, Name: "arena"}
	_, err := e.modules.ResolveModule(ctx, req(r, ""))
	wantCode(t, err, connect.CodeUnauthenticated, "missing cluster token")
	_, err = e.modules.ResolveModule(ctx, req(r, "wrong-token-0123456789"))
	wantCode(t, err, connect.CodeUnauthenticated, "wrong cluster token")
	_, err = e.modules.ResolveModule(ctx, req(r, key))
	wantCode(t, err, connect.CodeUnauthenticated)
	_, err = e.modules.ResolveModule(ctx, req(r, operatorKey))
	wantCode(t, err, connect.CodeUnauthenticated)

	e2 := newEnv(t, func(c *backend.Config) { c.ClusterToken = "" })
	_, err = e2.modules.ResolveModule(ctx, req(r, clusterToken))
	wantCode(t, err, connect.CodeUnauthenticated, "no cluster token configured")
}

func TestSQLMetacharactersVerbatim(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	nasty := []string{
		`'; DROP TABLE tenants; --`,
		`Robert"); DELETE FROM accounts; --`,
		`100% _real_ \ studio`,
		`ünïcødé 🎮 名前`,
	}
	for i, name := range nasty {
		slug := fmt.Sprintf("nasty-%d", i)
		r, err := e.admin.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: slug, Name: name}, operatorKey))
		if err != nil {
			t.Fatal(err)
		}
		if r.Msg.Tenant.Name != name {
			t.Errorf("tenant name %q came back as %q", name, r.Msg.Tenant.Name)
		}
		want := strings.TrimSpace(name[:min(len(name), 32)])
		login := e.guestLogin(slug, device, want)
		claims, err := e.srv.Verifier().Verify(ctx, login.Ticket)
		if err != nil {
			t.Fatal(err)
		}
		if login.DisplayName != want || claims.DisplayName != want {
			t.Errorf("display name %q came back as %q / %q", want, login.DisplayName, claims.DisplayName)
		}
	}
	list, err := e.admin.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, operatorKey))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.Tenants) != len(nasty) {
		t.Fatalf("%d tenants, want %d", len(list.Msg.Tenants), len(nasty))
	}
	for i, tn := range list.Msg.Tenants {
		if tn.Name != nasty[i] {
			t.Errorf("stored name %q, want %q", tn.Name, nasty[i])
		}
	}
	// A slug with metacharacters is refused before it reaches the store.
	_, err = e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "x' OR '1'='1", DeviceId: device}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestEnsureTenantAndModule(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id1, err := e.srv.EnsureTenant(ctx, "demo", "Demo")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := e.srv.EnsureTenant(ctx, "demo", "Other name")
	if err != nil || id2 != id1 {
		t.Fatalf("EnsureTenant again = %s, %v; want %s", id2, err, id1)
	}
	if _, err := e.srv.EnsureTenant(ctx, "Bad Slug", ""); err == nil {
		t.Error("EnsureTenant accepted a bad slug")
	}
	// Guests can sign in to it.
	e.guestLogin("demo", device, "")

	v1, v2 := wasm("v1"), wasm("v2")
	b1, err := e.srv.EnsureModule(ctx, id1, "arena", v1)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(v1)
	if b1 != hex.EncodeToString(sum[:]) {
		t.Errorf("build id = %s", b1)
	}
	again, err := e.srv.EnsureModule(ctx, id1, "arena", v1)
	if err != nil || again != b1 {
		t.Fatalf("EnsureModule again = %s, %v", again, err)
	}
	count := func() int {
		ms, err := e.store.ListModules(ctx, id1)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d modules after ensuring the same bytes twice, want 1", n)
	}
	b2, err := e.srv.EnsureModule(ctx, id1, "arena", v2)
	if err != nil || b2 == b1 {
		t.Fatalf("EnsureModule v2 = %s, %v", b2, err)
	}
	// Back to v1: it becomes the newest again, still no duplicate.
	if b, err := e.srv.EnsureModule(ctx, id1, "arena", v1); err != nil || b != b1 {
		t.Fatalf("EnsureModule v1 again = %s, %v", b, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d modules, want 2", n)
	}
	latest, _ := e.store.LatestModule(ctx, id1, "arena")
	if latest.BuildID != b1 {
		t.Errorf("newest = %s, want v1", latest.BuildID)
	}
	_, err = e.srv.EnsureModule(ctx, id1, "arena", []byte("junk"))
	wantCode(t, err, connect.CodeInvalidArgument, "module rejected")
}

func TestFleetViews(t *testing.T) {
	e := newEnv(t)
	tn, key := e.createTenant("demo")
	ctx := context.Background()
	games, err := e.admin.ListGames(ctx, req(&ludusv1.AdminServiceListGamesRequest{}, key))
	if err != nil {
		t.Fatal(err)
	}
	if len(games.Msg.Games) != 1 || games.Msg.Games[0].GameId != "g-"+tn.Id {
		t.Errorf("ListGames = %v", games.Msg.Games)
	}
	if len(e.fleet.tenants) != 1 || e.fleet.tenants[0] != tn.Id {
		t.Errorf("fleet asked for tenants %v, want [%s]", e.fleet.tenants, tn.Id)
	}
	_, err = e.admin.ListGames(ctx, req(&ludusv1.AdminServiceListGamesRequest{}, operatorKey))
	wantCode(t, err, connect.CodePermissionDenied)
	nodes, err := e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, operatorKey))
	if err != nil || len(nodes.Msg.Nodes) != 1 || nodes.Msg.Nodes[0].Id != "n1" {
		t.Errorf("ListNodes = %v, %v", nodes, err)
	}
	_, err = e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, key))
	wantCode(t, err, connect.CodePermissionDenied, "operator key")
	_, err = e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, ""))
	wantCode(t, err, connect.CodeUnauthenticated)

	e.fleet.err = errors.New("etcd: context deadline exceeded at 10.0.0.9:2379")
	_, err = e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, operatorKey))
	wantCode(t, err, connect.CodeUnavailable, "try again")
	if strings.Contains(err.Error(), "10.0.0.9") {
		t.Errorf("fleet error leaked: %v", err)
	}

	e2 := newEnv(t, func(c *backend.Config) { c.Fleet = nil })
	_, key2 := e2.createTenant("demo")
	_, err = e2.admin.ListGames(ctx, req(&ludusv1.AdminServiceListGamesRequest{}, key2))
	wantCode(t, err, connect.CodeUnavailable, "not configured")
}

// failingStore fails every tenant lookup with a SQL-looking error.
type failingStore struct{ store.Store }

var errSQL = errors.New(`sqlite: near "SELECT secret_column FROM tenants": syntax error`)

func (failingStore) TenantBySlug(context.Context, string) (store.Tenant, error) {
	return store.Tenant{}, errSQL
}

func (failingStore) ListTenants(context.Context) ([]store.Tenant, error) { return nil, errSQL }

func TestStoreErrorsDoNotLeak(t *testing.T) {
	e := newEnv(t)
	e.http.Close()
	e.startWith(failingStore{e.store})
	ctx := context.Background()
	_, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: device}))
	wantCode(t, err, connect.CodeInternal)
	if msg := err.(*connect.Error).Message(); msg != "internal error" {
		t.Errorf("client saw %q", msg)
	}
	_, err = e.admin.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, operatorKey))
	wantCode(t, err, connect.CodeInternal)
	if strings.Contains(err.Error(), "SELECT") {
		t.Errorf("SQL leaked: %v", err)
	}
	if !strings.Contains(e.logs.String(), "secret_column") {
		t.Errorf("store error not logged; logs:\n%s", e.logs.String())
	}
}

func TestNewValidatesConfig(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, cfg := range map[string]backend.Config{
		"no store":           {ValidateModule: fakeValidate},
		"no validator":       {Store: e.store},
		"short operator key": {Store: e.store, ValidateModule: fakeValidate, OperatorKey: "short"},
		"short cluster":      {Store: e.store, ValidateModule: fakeValidate, ClusterToken: "short"},
	} {
		if _, err := backend.New(ctx, cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestConcurrentFirstLogin(t *testing.T) {
	e := newEnv(t)
	e.createTenant("demo")
	ctx := context.Background()
	const n = 16
	ids := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			r, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: "race-device-0123456789"}))
			if err != nil {
				errs <- err
				return
			}
			ids <- r.Msg.AccountId
		}()
	}
	seen := map[string]bool{}
	for range n {
		select {
		case id := <-ids:
			seen[id] = true
		case err := <-errs:
			t.Fatal(err)
		}
	}
	if len(seen) != 1 {
		t.Errorf("concurrent first logins made %d accounts", len(seen))
	}
}

// TestRotationReachesEveryReplica: two backends on one database (a
// deployment runs several). A rotation on one reaches the other without a
// restart: on a ticket of the new key, on a request for its public keys,
// and on its periodic read, which also drops keys the first one pruned.
func TestRotationReachesEveryReplica(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { backend.SetKeySyncGap(c, time.Nanosecond) })
	e.createTenant("demo")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := backend.Config{Store: st, ValidateModule: fakeValidate, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)}
	backend.SetKeySyncGap(&cfg, time.Nanosecond)
	b, err := backend.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bHTTP := httptest.NewServer(b.Handler())
	defer bHTTP.Close()
	first, _ := b.KeySet().Current()
	if a, _ := e.srv.KeySet().Current(); a.ID != first.ID {
		t.Fatalf("replicas start with different keys: %s and %s", a.ID, first.ID)
	}

	// A ticket of the key A rotated to verifies on B, which now signs with it.
	e.clock.Add(10 * time.Second)
	second, err := e.srv.RotateSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	login := e.guestLogin("demo", device, "")
	if _, err := b.Verifier().Verify(ctx, login.Ticket); err != nil {
		t.Fatalf("replica B refuses a ticket of the key A rotated to: %v", err)
	}
	if k, _ := b.KeySet().Current(); k.ID != second {
		t.Fatalf("replica B signs with %s after A rotated to %s", k.ID, second)
	}

	// B's public keys, asked for, include the key A rotated to since.
	e.clock.Add(10 * time.Second)
	third, err := e.srv.RotateSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := bHTTP.Client().Get(bHTTP.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	keys, err := auth.ParseJWKS(body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Key(ctx, third); err != nil {
		t.Fatalf("replica B's public keys lack the key A rotated to: %v", err)
	}
	if k, _ := b.KeySet().Current(); k.ID != third {
		t.Fatalf("replica B signs with %s after A rotated to %s", k.ID, third)
	}

	// Once the first key's tickets expired and A pruned it, B's periodic
	// read drops it too: a leaked key stops working everywhere.
	e.clock.Add(auth.KeyRetention + time.Second)
	if _, err := e.srv.RotateSigningKey(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.SyncSigningKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.KeySet().Key(ctx, first.ID); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("replica B still publishes the pruned key %s: %v", first.ID, err)
	}
	if ka, kb := mustCurrent(t, e.srv), mustCurrent(t, b); ka != kb {
		t.Fatalf("replicas sign with different keys: %s and %s", ka, kb)
	}
}

func mustCurrent(t *testing.T, s *backend.Server) string {
	t.Helper()
	k, ok := s.KeySet().Current()
	if !ok {
		t.Fatal("no current key")
	}
	return k.ID
}
