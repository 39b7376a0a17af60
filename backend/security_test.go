package backend_test

// Findings of a hostile try of `ludus dev`: each test here failed before its
// fix. They use the default Config.

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

func newAuthClient(e *env, opts ...connect.ClientOption) ludusv1connect.AuthServiceClient {
	return ludusv1connect.NewAuthServiceClient(e.http.Client(), e.http.URL, opts...)
}

// TestWebhookURLRefusesInternal: SetWebhook refuses URLs that reach, or
// resolve to, non-public addresses, in every spelling.
func TestWebhookURLRefusesInternal(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("ssrf")
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	set := func(u string) error {
		_, err := e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: u}, admin))
		return err
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(hook.URL, "http://"), ":")
	for _, u := range []string{
		hook.URL + "/hook",
		"http://localhost:" + port + "/hook",
		"http://LOCALHOST./hook",
		"http://127.0.0.2/",
		"http://10.0.0.1/",
		"http://172.16.5.4/",
		"http://192.168.1.1:8080/",
		"http://169.254.169.254/latest/meta-data/",
		"http://[fe80::1%25eth0]/",
		"http://[::1]/",
		"http://[::]/",
		"http://0.0.0.0:" + port + "/",
		"http://0/",
		"http://100.64.0.1/",
		"http://224.0.0.1/",
		"http://255.255.255.255/",
		"http://[fd12:3456::1]/",
		"http://[::ffff:127.0.0.1]/",
		"http://[::ffff:10.0.0.1]/",
		"http://[::127.0.0.1]/",
		"http://[64:ff9b::7f00:1]/",
		"http://[64:ff9b:1::a00:1]/",
		"http://[::ffff:0:a9fe:a9fe]/",
		"http://[2002:a9fe:a9fe::1]/",
		"https://internal.example/hook",
		"https://mixed.example/hook",
		"https://does-not-resolve.example/hook",
	} {
		wantCode(t, set(u), connect.CodeInvalidArgument, "public")
	}
	// Unresolvable and internal names get the same answer (no map of the
	// operator's names).
	a, b := set("https://internal.example/"), set("https://nope.example/")
	if strings.ReplaceAll(a.Error(), "internal.example", "X") != strings.ReplaceAll(b.Error(), "nope.example", "X") {
		t.Errorf("internal and unresolvable names answered differently:\n%v\n%v", a, b)
	}
	for _, u := range []string{"ftp://93.184.215.14/", "https://user:pw@93.184.215.14/", "https:///path", "/relative", "mailto:a@b.c"} {
		wantCode(t, set(u), connect.CodeInvalidArgument, "url")
	}
	for _, u := range []string{"https://93.184.215.14/hook", "https://hooks.example.com/ludus?x=1", "http://example.com:8443/h",
		"https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/hook", ""} {
		if err := set(u); err != nil {
			t.Errorf("SetWebhook(%q): %v", u, err)
		}
	}
}

// TestWebhookDeliveryRefusesInternal: a webhook stored with an internal
// address (set before the check, or a name that now resolves elsewhere)
// is never dialled, and the tenant's view of the failure names no address.
func TestWebhookDeliveryRefusesInternal(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("rebind")
	var hits atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer hook.Close()
	if err := e.store.PutWebhook(ctx, store.Webhook{TenantID: tn.Id, URL: hook.URL + "/hook", Secret: []byte("whsec_x")}); err != nil {
		t.Fatal(err)
	}
	a, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "r1"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	cred := e.mint(tn.Id, "rm", "arena")
	if _, err := backend.NewMatchReporter(e.http.Client(), e.http.URL, "rm", cred).ReportResult(ctx, 0,
		[]*ludusv1.PlayerResult{{AccountId: a.Msg.Account.Id, Score: 1}}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.srv.DeliverWebhooks(ctx); n != 1 || err != nil {
		t.Fatalf("DeliverWebhooks: %d, %v", n, err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the webhook reached %s", hook.URL)
	}
	ds, err := e.admin.ListWebhookDeliveries(ctx, req(&ludusv1.ListWebhookDeliveriesRequest{}, admin))
	if err != nil || len(ds.Msg.Deliveries) != 1 {
		t.Fatalf("deliveries: %v, %v", ds, err)
	}
	d := ds.Msg.Deliveries[0]
	_, port, _ := strings.Cut(strings.TrimPrefix(hook.URL, "http://"), ":")
	if d.State != "pending" || !strings.HasPrefix(d.LastError, "delivery failed: ") || strings.Contains(d.LastError, "127.0.0.1") ||
		strings.Contains(d.LastError, port) || strings.Contains(d.LastError, "dial") {
		t.Errorf("delivery %s %q", d.State, d.LastError)
	}
}

// TestSignupThrottle: account creation is throttled per client address
// (through a trusted proxy, per X-Forwarded-For), with a retry hint;
// existing accounts sign in regardless.
func TestSignupThrottle(t *testing.T) {
	e := newEnv(t)
	e.createTenant("flood")
	guest := func(dev, xff string) error {
		r := connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "flood", DeviceId: dev})
		if xff != "" {
			r.Header().Set("X-Forwarded-For", xff)
		}
		_, err := e.auth.GuestLogin(ctx, r)
		return err
	}
	burst := backend.DefaultSignupsPerAddress.Burst
	var throttled error
	created := 0
	for i := range 200 {
		if err := guest(fmt.Sprintf("flood-device-%08d", i), ""); err != nil {
			throttled = err
			break
		}
		created++
	}
	if created != burst {
		t.Fatalf("created %d guest accounts from one address before a refusal (%v); want %d", created, throttled, burst)
	}
	wantCode(t, throttled, connect.CodeResourceExhausted, "too many new accounts", "retry in 3 s")
	if ra := throttled.(*connect.Error).Meta().Get("Retry-After"); ra != "3" {
		t.Errorf("Retry-After = %q, want 3", ra)
	}
	// Existing accounts are not throttled.
	for i := range 5 {
		if err := guest(fmt.Sprintf("flood-device-%08d", i), ""); err != nil {
			t.Fatalf("existing guest: %v", err)
		}
	}
	_, err := e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "flood", Email: "a@example.com", Password: "password123"}))
	wantCode(t, err, connect.CodeResourceExhausted, "retry in")
	// Another client behind the (loopback, trusted) proxy has its own bucket;
	// only the hop the proxy added counts, not what the client claims.
	if err := guest("other-client-000001", "198.51.100.7"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	if err := guest("other-client-000002", "10.9.9.9, 198.51.100.8, 127.0.0.1"); err != nil {
		t.Fatalf("another address through two proxies: %v", err)
	}
	for i := range burst - 1 {
		if err := guest(fmt.Sprintf("spoof-device-%08d", i), fmt.Sprintf("192.0.2.%d, 198.51.100.7", i)); err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
	}
	wantCode(t, guest("spoof-device-99999999", "192.0.2.250, 198.51.100.7"), connect.CodeResourceExhausted)
	// IPv6: one /64 is one subscriber.
	for i := range burst {
		if err := guest(fmt.Sprintf("six-device-%08d", i), fmt.Sprintf("2001:db8:1:2::%x", i+1)); err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
	}
	wantCode(t, guest("six-device-99999999", "2001:db8:1:2:ffff::1"), connect.CodeResourceExhausted)
	if err := guest("six-device-other", "2001:db8:1:3::1"); err != nil {
		t.Fatalf("another /64: %v", err)
	}
	// The bucket refills: 20 a minute is one every 3 s.
	e.clock.Add(3 * time.Second)
	if err := guest("flood-device-after", ""); err != nil {
		t.Fatalf("after 3 s: %v", err)
	}
	wantCode(t, guest("flood-device-after2", ""), connect.CodeResourceExhausted)
}

// TestRequestSizeLimits: each service reads at most what it needs; only
// UploadModule takes a module-sized message.
func TestRequestSizeLimits(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("sizes")
	mib := strings.Repeat("x", 1<<20)
	_, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "sizes", DeviceId: mib}))
	wantCode(t, err, connect.CodeResourceExhausted)
	// Compressed small on the wire, 1 MiB once inflated: refused too.
	gz := newAuthClient(e, connect.WithSendGzip())
	_, err = gz.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "sizes", DeviceId: mib}))
	wantCode(t, err, connect.CodeResourceExhausted)
	_, err = e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: mib}, admin))
	wantCode(t, err, connect.CodeResourceExhausted)
	g := e.guestLogin("sizes", "size-device-00000001", "")
	_, err = e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: mib}}, g.Ticket))
	wantCode(t, err, connect.CodeResourceExhausted)
	cred := e.mint(tn.Id, "sm", "arena")
	_, err = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "sm", Seq: 1,
		Players: []*ludusv1.PlayerResult{{AccountId: strings.Repeat(mib, 9)}}}, cred))
	wantCode(t, err, connect.CodeResourceExhausted)
	// Small requests still work, and an upload well past the other limits too.
	if _, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "sizes", DeviceId: "size-device-00000002"})); err != nil {
		t.Fatal(err)
	}
	big := wasm(string(bytes.Repeat([]byte{1}, 4<<20)))
	if _, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "big", Wasm: big}, admin)); err != nil {
		t.Fatalf("4 MiB upload: %v", err)
	}
	if _, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, admin)); err != nil {
		t.Fatal(err)
	}
}

// TestListNodesOperatorOnly: node addresses are the operator's; no tenant
// key, whatever its scope, lists them, and no tenant-visible answer carries
// them.
func TestListNodesOperatorOnly(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("nodes")
	for scope, key := range map[string]string{"admin": admin, "server": e.apiKey(admin, "server"), "read-only": e.apiKey(admin, "read-only")} {
		_, err := e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, key))
		wantCode(t, err, connect.CodePermissionDenied, "ListNodes needs the operator key")
		games, err := e.admin.ListGames(ctx, req(&ludusv1.AdminServiceListGamesRequest{}, key))
		if err != nil {
			t.Fatalf("%s: ListGames: %v", scope, err)
		}
		if s := games.Msg.String(); strings.Contains(s, "10.0.0.1") {
			t.Errorf("%s: ListGames shows a node address: %s", scope, s)
		}
	}
	nodes, err := e.admin.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, operatorKey))
	if err != nil || len(nodes.Msg.Nodes) != 1 || nodes.Msg.Nodes[0].Address != "10.0.0.1:7000" {
		t.Fatalf("operator: %v, %v", nodes, err)
	}
}

// TestArchiveKeepsNoMatchCredential: an archived spec is readable by every
// key of the tenant, so the match credential in it is not stored.
func TestArchiveKeepsNoMatchCredential(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("arch-cred")
	ro := e.apiKey(admin, "read-only")
	spec := []byte(`{"tenant_id":"` + tn.Id + `","game_id":"g-c","build_id":"abc","seed":7,"match_credential":"lmc_secret"}`)
	ac := backend.NewArchiveClient(e.http.Client(), e.http.URL, clusterToken)
	if err := ac.Archive(ctx, &clusterv1.ArchiveGameRequest{TenantId: tn.Id, GameId: "g-c", SpecJson: spec, State: "failed",
		Message: "match failed: the game module exceeded its CPU deadline at tick 99 (build abc)", FinalTick: 99}); err != nil {
		t.Fatal(err)
	}
	lg, err := e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g-c"}, ro))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(lg.Msg.SpecJson, []byte("lmc_")) || !bytes.Contains(lg.Msg.SpecJson, []byte(`"build_id":"abc"`)) {
		t.Errorf("archived spec %s", lg.Msg.SpecJson)
	}
	if lg.Msg.Message == "" || lg.Msg.FinalTick != 99 || lg.Msg.State != "failed" {
		t.Errorf("archive lost its reason: %+v", lg.Msg)
	}
}

// TestDeviceIDsOnlyForAdminKeys: a guest's device id is its only
// credential (GuestLogin needs nothing else), so GetAccount tells it only
// to an admin key, or to a caller who looked the account up by it: a
// read-only or server key that learns an account id from a leaderboard
// cannot sign in as that guest.
func TestDeviceIDsOnlyForAdminKeys(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("dv")
	g := e.guestLogin("dv", "dv-device-secret-0001", "Ada")
	for scope, key := range map[string]string{"server": e.apiKey(admin, "server"), "read-only": e.apiKey(admin, "read-only"), "admin": admin} {
		got, err := e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{Id: g.AccountId}, key))
		if err != nil {
			t.Fatalf("%s: %v", scope, err)
		}
		want := ""
		if scope == "admin" {
			want = "dv-device-secret-0001"
		}
		if got.Msg.Account.DeviceId != want || got.Msg.Account.Id != g.AccountId {
			t.Errorf("GetAccount by id with a %s key: device_id %q, want %q", scope, got.Msg.Account.DeviceId, want)
		}
		byDevice, err := e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{DeviceId: "dv-device-secret-0001"}, key))
		if err != nil || byDevice.Msg.Account.Id != g.AccountId || byDevice.Msg.Account.DeviceId != "dv-device-secret-0001" {
			t.Errorf("GetAccount by device with a %s key: %+v, %v", scope, byDevice, err)
		}
		// Naming a device id beside the account id does not unlock it: the
		// lookup goes by the account id.
		both, err := e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{Id: g.AccountId, DeviceId: "guessed-device-0001"}, key))
		if err != nil || both.Msg.Account.DeviceId != want {
			t.Errorf("GetAccount by id and a guessed device with a %s key: device_id %q, %v; want %q", scope, both.Msg.GetAccount().GetDeviceId(), err, want)
		}
	}
}

// TestAPIKeysPerTenantBounded: CreateAPIKey refuses a key past
// store.MaxAPIKeysPerTenant with ResourceExhausted saying what to do, and
// creates again once one is revoked.
func TestAPIKeysPerTenantBounded(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("kc")
	keys, err := e.admin.ListAPIKeys(ctx, req(&ludusv1.ListAPIKeysRequest{}, admin))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for range store.MaxAPIKeysPerTenant - len(keys.Msg.Keys) {
		k, err := e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only"}, admin))
		if err != nil {
			t.Fatal(err)
		}
		last = k.Msg.Key.Id
	}
	_, err = e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only"}, admin))
	wantCode(t, err, connect.CodeResourceExhausted, "holds 100 API keys", "revoke the ones no longer used")
	if _, err := e.admin.RevokeAPIKey(ctx, req(&ludusv1.RevokeAPIKeyRequest{Id: last}, admin)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only"}, admin)); err != nil {
		t.Fatalf("after a revocation: %v", err)
	}
}
