package backend_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres"
	"ludus.dev/ludus/backend/store/postgres/pgtest"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
)

var ctx = context.Background()

// newEnvPostgres is newEnv on a fresh PostgreSQL schema (skips without one).
func newEnvPostgres(t *testing.T, opts ...option) *env {
	dsn := pgtest.FreshSchema(t)
	e := &env{t: t, clock: &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, fleet: &fakeFleet{}, logs: &syncBuffer{}, opts: opts}
	e.reopen = func() store.Store {
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	e.store = e.reopen()
	e.startWith(e.store)
	return e
}

// bothStores runs f on SQLite and on PostgreSQL.
func bothStores(t *testing.T, f func(t *testing.T, e *env), opts ...option) {
	t.Run("sqlite", func(t *testing.T) { f(t, newEnv(t, opts...)) })
	t.Run("postgres", func(t *testing.T) { f(t, newEnvPostgres(t, opts...)) })
}

// allowPrivateWebhooks lets webhooks reach the test's servers on 127.0.0.1.
func allowPrivateWebhooks(c *backend.Config) { c.AllowPrivateWebhooks = true }

func (e *env) apiKey(adminKey, scope string) string {
	e.t.Helper()
	resp, err := e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: scope, Name: scope}, adminKey))
	if err != nil {
		e.t.Fatalf("CreateAPIKey(%s): %v", scope, err)
	}
	return resp.Msg.Secret
}

func (e *env) mint(tenantID, matchID, game string) string {
	e.t.Helper()
	resp, err := e.modules.MintMatchCredential(ctx, req(&clusterv1.MintMatchCredentialRequest{TenantId: tenantID, MatchId: matchID, Game: game}, clusterToken))
	if err != nil {
		e.t.Fatalf("MintMatchCredential: %v", err)
	}
	return resp.Msg.Credential
}

func (e *env) progression(adminKey, accountID string) *ludusv1.Progression {
	e.t.Helper()
	resp, err := e.admin.GetAccountProgression(ctx, req(&ludusv1.GetAccountProgressionRequest{AccountId: accountID}, adminKey))
	if err != nil {
		e.t.Fatalf("GetAccountProgression: %v", err)
	}
	return resp.Msg.Progression
}

// TestScopesOnEveryAdminCall calls every AdminService method with each kind
// of key: a call a key may not make is PermissionDenied; one it may make is not.
func TestScopesOnEveryAdminCall(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("scopes")
	keys := map[string]string{"admin": admin, "server": e.apiKey(admin, "server"), "read-only": e.apiKey(admin, "read-only"), "operator": operatorKey}
	type call func(key string) error
	c := e.admin
	calls := map[string]struct {
		allowed string // scopes allowed, space separated
		call    call
	}{
		"CreateTenant": {"operator", func(k string) error {
			_, err := c.CreateTenant(ctx, req(&ludusv1.CreateTenantRequest{Slug: "x" + strings.ReplaceAll(k[:8], "_", "-")}, k))
			return err
		}},
		"ListTenants": {"operator", func(k string) error { _, err := c.ListTenants(ctx, req(&ludusv1.ListTenantsRequest{}, k)); return err }},
		"UploadModule": {"admin", func(k string) error {
			_, err := c.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "m", Wasm: wasm("m")}, k))
			return err
		}},
		"ListModules": {"admin server read-only", func(k string) error { _, err := c.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, k)); return err }},
		"DeleteModule": {"admin", func(k string) error {
			_, err := c.DeleteModule(ctx, req(&ludusv1.DeleteModuleRequest{BuildId: strings.Repeat("0", 64)}, k))
			return err
		}},
		"PruneModules": {"admin", func(k string) error {
			_, err := c.PruneModules(ctx, req(&ludusv1.PruneModulesRequest{Name: "m", Keep: 1}, k))
			return err
		}},
		"ListGames": {"admin server read-only", func(k string) error {
			_, err := c.ListGames(ctx, req(&ludusv1.AdminServiceListGamesRequest{}, k))
			return err
		}},
		"ListNodes": {"operator", func(k string) error { _, err := c.ListNodes(ctx, req(&ludusv1.ListNodesRequest{}, k)); return err }},
		"CreateAPIKey": {"admin", func(k string) error {
			_, err := c.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only"}, k))
			return err
		}},
		"ListAPIKeys": {"admin", func(k string) error { _, err := c.ListAPIKeys(ctx, req(&ludusv1.ListAPIKeysRequest{}, k)); return err }},
		"RotateAPIKey": {"admin", func(k string) error {
			_, err := c.RotateAPIKey(ctx, req(&ludusv1.RotateAPIKeyRequest{Id: "k_nope"}, k))
			return err
		}},
		"RevokeAPIKey": {"admin", func(k string) error {
			_, err := c.RevokeAPIKey(ctx, req(&ludusv1.RevokeAPIKeyRequest{Id: "k_nope"}, k))
			return err
		}},
		"RotateSigningKey": {"operator", func(k string) error {
			_, err := c.RotateSigningKey(ctx, req(&ludusv1.RotateSigningKeyRequest{}, k))
			return err
		}},
		"CreateAccount": {"admin server", func(k string) error {
			_, err := c.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "c-" + k[:10]}, k))
			return err
		}},
		"GetAccount": {"admin server read-only", func(k string) error {
			_, err := c.GetAccount(ctx, req(&ludusv1.GetAccountRequest{Id: "a_nope"}, k))
			return err
		}},
		"DeleteAccount": {"admin", func(k string) error {
			_, err := c.DeleteAccount(ctx, req(&ludusv1.DeleteAccountRequest{Id: "a_nope"}, k))
			return err
		}},
		"ExportAccount": {"admin", func(k string) error {
			_, err := c.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: "a_nope"}, k))
			return err
		}},
		"GrantProgression": {"admin server", func(k string) error {
			_, err := c.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: "a_nope", IdempotencyKey: "x"}, k))
			return err
		}},
		"GetAccountProgression": {"admin server read-only", func(k string) error {
			_, err := c.GetAccountProgression(ctx, req(&ludusv1.GetAccountProgressionRequest{AccountId: "a_nope"}, k))
			return err
		}},
		"ListMatchResults": {"admin server read-only", func(k string) error {
			_, err := c.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{}, k))
			return err
		}},
		"SetResultRules": {"admin", func(k string) error {
			_, err := c.SetResultRules(ctx, req(&ludusv1.SetResultRulesRequest{}, k))
			return err
		}},
		"GetResultRules": {"admin server read-only", func(k string) error {
			_, err := c.GetResultRules(ctx, req(&ludusv1.GetResultRulesRequest{}, k))
			return err
		}},
		"GetRating": {"admin server read-only", func(k string) error {
			_, err := c.GetRating(ctx, req(&ludusv1.GetRatingRequest{Mode: "arena", AccountId: "a_nope"}, k))
			return err
		}},
		"GetAdminLeaderboard": {"admin server read-only", func(k string) error {
			_, err := c.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}}, k))
			return err
		}},
		"SetWebhook": {"admin", func(k string) error { _, err := c.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{}, k)); return err }},
		"GetWebhook": {"admin server read-only", func(k string) error { _, err := c.GetWebhook(ctx, req(&ludusv1.GetWebhookRequest{}, k)); return err }},
		"ListWebhookDeliveries": {"admin server read-only", func(k string) error {
			_, err := c.ListWebhookDeliveries(ctx, req(&ludusv1.ListWebhookDeliveriesRequest{}, k))
			return err
		}},
		"GetGameLog": {"admin server read-only", func(k string) error {
			_, err := c.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g_nope"}, k))
			return err
		}},
		"ListArchivedGames": {"admin server read-only", func(k string) error {
			_, err := c.ListArchivedGames(ctx, req(&ludusv1.ListArchivedGamesRequest{}, k))
			return err
		}},
	}
	methods := ludusv1.File_ludus_v1_admin_proto.Services().ByName("AdminService").Methods()
	if methods.Len() != len(calls) {
		t.Fatalf("AdminService has %d methods, the test covers %d: add the new ones", methods.Len(), len(calls))
	}
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		tc, ok := calls[name]
		if !ok {
			t.Fatalf("AdminService.%s is not covered", name)
		}
		for scope, key := range keys {
			err := tc.call(key)
			allowed := strings.Contains(" "+tc.allowed+" ", " "+scope+" ")
			denied := connect.CodeOf(err) == connect.CodePermissionDenied
			if allowed == denied {
				t.Errorf("%s with %s key: %v (allowed %v)", name, scope, err, allowed)
			}
			if err == nil && !allowed {
				t.Errorf("%s with %s key succeeded", name, scope)
			}
		}
		if _, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, "lds_unknown")); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("unknown key: %v", err)
		}
	}
	// A revoked key stops working; a rotated key's old secret too.
	created, err := e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	ro, id := created.Msg.Secret, created.Msg.Key.Id
	rot, err := e.admin.RotateAPIKey(ctx, req(&ludusv1.RotateAPIKeyRequest{Id: id}, admin))
	if err != nil || rot.Msg.Key.Scope != "read-only" {
		t.Fatalf("rotate: %v", err)
	}
	_, err = e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, ro))
	wantCode(t, err, connect.CodeUnauthenticated)
	if _, err := e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, rot.Msg.Secret)); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if _, err := e.admin.RevokeAPIKey(ctx, req(&ludusv1.RevokeAPIKeyRequest{Id: rot.Msg.Key.Id}, admin)); err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.ListModules(ctx, req(&ludusv1.ListModulesRequest{}, rot.Msg.Secret))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestEmailLoginThrottleAndLockout(t *testing.T) {
	e := newEnv(t)
	e.createTenant("pw")
	_, err := e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "pw", Email: "Ann@Example.com", Password: "correct horse"}))
	if err != nil {
		t.Fatal(err)
	}
	login := func(pw string) error {
		_, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "pw", Email: "ann@example.com", Password: pw}))
		return err
	}
	if err := login("correct horse"); err != nil {
		t.Fatalf("login: %v", err)
	}
	for range backend.ThrottleFreeFailures {
		wantCode(t, login("wrong"), connect.CodeUnauthenticated, "wrong email or password")
	}
	// Slowed: the next attempt, even with the right password, must wait.
	wantCode(t, login("correct horse"), connect.CodeResourceExhausted, "retry in")
	for i := backend.ThrottleFreeFailures; i < backend.LockoutFailures; i++ {
		e.clock.Add(2 * time.Minute)
		wantCode(t, login("wrong"), connect.CodeUnauthenticated)
	}
	// Locked.
	e.clock.Add(2 * time.Minute)
	wantCode(t, login("correct horse"), connect.CodeResourceExhausted, "locked until")
	e.clock.Add(backend.LockoutDuration)
	if err := login("correct horse"); err != nil {
		t.Fatalf("login after lockout: %v", err)
	}
	// Unknown emails answer like wrong passwords.
	_, err = e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "pw", Email: "nobody@example.com", Password: "whatever1"}))
	wantCode(t, err, connect.CodeUnauthenticated, "wrong email or password")
	_, err = e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "pw", Email: "ann@example.com", Password: "another one"}))
	wantCode(t, err, connect.CodeAlreadyExists)
}

func TestRefreshRotationReuseAndLogout(t *testing.T) {
	e := newEnv(t)
	e.createTenant("rt")
	g := e.guestLogin("rt", "device-rt-0123456789", "")
	if g.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	refresh := func(tok string) (*ludusv1.Session, error) { return e.refresh("rt", tok) }
	s1, err := refresh(g.RefreshToken)
	if err != nil || s1.AccountId != g.AccountId || s1.RefreshToken == g.RefreshToken {
		t.Fatalf("refresh: %v %v", s1, err)
	}
	if _, err := e.srv.Verifier().Verify(ctx, s1.Ticket); err != nil {
		t.Fatalf("refreshed ticket: %v", err)
	}
	s2, err := refresh(s1.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	// Reusing s1's token (stolen) revokes the family: s2's token dies too.
	_, err = refresh(s1.RefreshToken)
	wantCode(t, err, connect.CodeUnauthenticated)
	_, err = refresh(s2.RefreshToken)
	wantCode(t, err, connect.CodeUnauthenticated)
	// Another tenant cannot use the token.
	e.createTenant("rt2")
	g = e.guestLogin("rt", "device-rt-0123456789", "")
	_, err = e.auth.Refresh(ctx, connect.NewRequest(&ludusv1.RefreshRequest{Tenant: "rt2", RefreshToken: g.RefreshToken}))
	wantCode(t, err, connect.CodeUnauthenticated)
	// Logout.
	g = e.guestLogin("rt", "device-rt-0123456789", "")
	if _, err := e.auth.Logout(ctx, connect.NewRequest(&ludusv1.LogoutRequest{Tenant: "rt", RefreshToken: g.RefreshToken})); err != nil {
		t.Fatal(err)
	}
	_, err = refresh(g.RefreshToken)
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestCustomLoginLinkUnlink(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("cu")
	server, ro := e.apiKey(admin, "server"), e.apiKey(admin, "read-only")
	_, err := e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: "player-1"}, ro))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: "player-1"}, ""))
	wantCode(t, err, connect.CodeUnauthenticated)
	r1, err := e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: "player-1", DisplayName: "One"}, server))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: "player-1"}, server))
	if err != nil || r2.Msg.Session.AccountId != r1.Msg.Session.AccountId {
		t.Fatalf("second custom login: %v", err)
	}
	ticket := r1.Msg.Session.Ticket
	if _, err := e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: "device-cu-0123456789"}, ticket)); err != nil {
		t.Fatal(err)
	}
	if g := e.guestLogin("cu", "device-cu-0123456789", ""); g.AccountId != r1.Msg.Session.AccountId {
		t.Fatal("linked device signs in another account")
	}
	// Without a password, a ticket cannot take the device from its holder.
	_, err = e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: "device-thief-0123456789"}, ticket))
	wantCode(t, err, connect.CodeFailedPrecondition, "only an account with a password can replace it")
	if _, err := e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: "one@example.com", Password: "password1"}, ticket)); err != nil {
		t.Fatal(err)
	}
	// With a password, a ticket alone (it may have leaked) changes nothing:
	// not the email and password, not the device, no unlinking.
	_, err = e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: "thief@example.com", Password: "password2"}, ticket))
	wantCode(t, err, connect.CodePermissionDenied, "current_password")
	_, err = e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: "thief@example.com", Password: "password2", CurrentPassword: "guess-one"}, ticket))
	wantCode(t, err, connect.CodePermissionDenied, "not this account's password")
	_, err = e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: "device-thief-0123456789"}, ticket))
	wantCode(t, err, connect.CodePermissionDenied, "current_password")
	_, err = e.auth.Unlink(ctx, req(&ludusv1.UnlinkRequest{Identity: ludusv1.Identity_IDENTITY_DEVICE}, ticket))
	wantCode(t, err, connect.CodePermissionDenied, "current_password")
	_, err = e.auth.Unlink(ctx, req(&ludusv1.UnlinkRequest{Identity: ludusv1.Identity(99), CurrentPassword: "password1"}, ticket))
	wantCode(t, err, connect.CodeInvalidArgument, "identity must be")
	if g := e.guestLogin("cu", "device-cu-0123456789", ""); g.AccountId != r1.Msg.Session.AccountId {
		t.Fatal("a refused change moved the device")
	}
	// Wrong guesses count like failed sign-ins with the email: they lock.
	for range backend.LockoutFailures {
		e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: "thief@example.com", Password: "password2", CurrentPassword: "guess-again"}, ticket))
	}
	_, err = e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: "one@example.com", Password: "password1", CurrentPassword: "password1"}, ticket))
	wantCode(t, err, connect.CodeResourceExhausted, "too many wrong passwords")
	e.clock.Add(backend.LockoutDuration + time.Second)
	// The owner, with the password, may (signed in again: the lock outlasted
	// the ticket).
	again, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "cu", Email: "one@example.com", Password: "password1"}))
	if err != nil {
		t.Fatal(err)
	}
	ticket = again.Msg.Session.Ticket
	if _, err := e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: "device-cu-new-0123456789", CurrentPassword: "password1"}, ticket)); err != nil {
		t.Fatal(err)
	}
	// Replacing the device ended the account's sessions: a refresh token
	// (a thief's, say) no longer works.
	_, err = e.auth.Refresh(ctx, connect.NewRequest(&ludusv1.RefreshRequest{Tenant: "cu", RefreshToken: again.Msg.Session.RefreshToken}))
	wantCode(t, err, connect.CodeUnauthenticated)
	for _, id := range []ludusv1.Identity{ludusv1.Identity_IDENTITY_DEVICE, ludusv1.Identity_IDENTITY_CUSTOM} {
		if _, err := e.auth.Unlink(ctx, req(&ludusv1.UnlinkRequest{Identity: id, CurrentPassword: "password1"}, ticket)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.auth.Unlink(ctx, req(&ludusv1.UnlinkRequest{Identity: ludusv1.Identity_IDENTITY_EMAIL, CurrentPassword: "password1"}, ticket))
	wantCode(t, err, connect.CodeFailedPrecondition, "last")
	lr, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "cu", Email: "one@example.com", Password: "password1"}))
	if err != nil || lr.Msg.Session.AccountId != r1.Msg.Session.AccountId {
		t.Fatalf("email login after linking: %v", err)
	}
	_, err = e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: "device-cu-0123456789"}, "not-a-ticket"))
	wantCode(t, err, connect.CodeUnauthenticated)
}

// TestCrossTenantIDs: every admin RPC taking an account id, given another
// tenant's id, answers NotFound and shows nothing.
func TestCrossTenantIDs(t *testing.T) {
	e := newEnv(t)
	_, adminA := e.createTenant("ta")
	_, adminB := e.createTenant("tb")
	acc, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "victim", DisplayName: "V"}, adminA))
	if err != nil {
		t.Fatal(err)
	}
	id := acc.Msg.Account.Id
	if _, err := e.admin.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: id, IdempotencyKey: "g", Xp: 5}, adminA)); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"GetAccount": func() error {
			_, err := e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{Id: id}, adminB))
			return err
		},
		"GetAccount by custom": func() error {
			_, err := e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{CustomId: "victim"}, adminB))
			return err
		},
		"DeleteAccount": func() error {
			_, err := e.admin.DeleteAccount(ctx, req(&ludusv1.DeleteAccountRequest{Id: id}, adminB))
			return err
		},
		"ExportAccount": func() error {
			_, err := e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: id}, adminB))
			return err
		},
		"GetAccountProgression": func() error {
			_, err := e.admin.GetAccountProgression(ctx, req(&ludusv1.GetAccountProgressionRequest{AccountId: id}, adminB))
			return err
		},
		"GrantProgression": func() error {
			_, err := e.admin.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: id, IdempotencyKey: "x", Xp: 1}, adminB))
			return err
		},
		"ListMatchResults": func() error {
			_, err := e.admin.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{AccountId: id}, adminB))
			return err
		},
		"GetAdminLeaderboard": func() error {
			_, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}, AroundAccountId: id}, adminB))
			return err
		},
	}
	for name, call := range calls {
		if code := connect.CodeOf(call()); code != connect.CodeNotFound && code != connect.CodePermissionDenied {
			t.Errorf("%s with another tenant's id: %v", name, code)
		}
	}
	if p := e.progression(adminA, id); p.Xp != 5 {
		t.Fatalf("victim's progression changed: %v", p)
	}
	// A match credential reports only its own match.
	tA, _ := e.store.TenantBySlug(ctx, "ta")
	tB, _ := e.store.TenantBySlug(ctx, "tb")
	credA := e.mint(tA.ID, "match-a", "arena")
	e.mint(tB.ID, "match-b", "arena")
	_, err = e.reports.ReportMatchResult(ctx, req(&ludusv1.ReportMatchResultRequest{MatchId: "match-b"}, credA))
	wantCode(t, err, connect.CodePermissionDenied)
}

// testMatchExactlyOnce: interim progress out of order and replayed, and the
// final result delivered twice, with a backend restart in the middle, grant once.
func testMatchExactlyOnce(t *testing.T, e *env) {
	tn, admin := e.createTenant("mx")
	a, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "p1"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	id := a.Msg.Account.Id
	cred := e.mint(tn.Id, "m-1", "arena")
	rep := backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)
	pl := func(xp, gold int64) []*ludusv1.PlayerResult {
		return []*ludusv1.PlayerResult{{AccountId: id, Score: xp, Xp: xp, Currency: map[string]int64{"gold": gold}}}
	}
	for _, r := range []struct {
		seq      int64
		xp, gold int64
		applied  bool
	}{{2, 20, 2, true}, {1, 10, 1, false}, {2, 20, 2, false}, {3, 30, 3, true}} {
		got, err := rep.ReportProgress(ctx, r.seq, pl(r.xp, r.gold))
		if err != nil || got != r.applied {
			t.Fatalf("progress seq %d: applied %v, %v", r.seq, got, err)
		}
	}
	e.restart()
	rep = backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)
	if p := e.progression(admin, id); p.Xp != 30 || p.Currency["gold"] != 3 {
		t.Fatalf("after interim and restart: %v", p)
	}
	for i, want := range []bool{true, false} {
		got, err := rep.ReportResult(ctx, 3, pl(50, 5))
		if err != nil || got != want {
			t.Fatalf("final #%d: applied %v, %v", i, got, err)
		}
	}
	if p := e.progression(admin, id); p.Xp != 50 || p.Currency["gold"] != 5 {
		t.Fatalf("after final twice: %v", p)
	}
	_, err = rep.ReportProgress(ctx, 9, pl(60, 6))
	wantCode(t, err, connect.CodeFailedPrecondition, "ended")
	// Player-facing reads.
	g := e.guestLogin("mx", "device-mx-0123456789", "")
	lb, err := e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}}, g.Ticket))
	if err != nil || len(lb.Msg.Entries) != 1 || lb.Msg.Entries[0].AccountId != id || lb.Msg.Entries[0].Best != 50 {
		t.Fatalf("leaderboard: %v %v", lb, err)
	}
	rs, err := e.admin.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{}, admin))
	if err != nil || len(rs.Msg.Results) != 1 || rs.Msg.Results[0].Players[0].Score != 50 {
		t.Fatalf("results: %v %v", rs, err)
	}
	// Credentials: unknown, and expired.
	_, err = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "m-1", Seq: 1}, "lmc_nope"))
	wantCode(t, err, connect.CodeUnauthenticated)
	// A credential outlives the longest game a module may declare (seven
	// days): its reports count until then.
	cred2 := e.mint(tn.Id, "m-2", "arena")
	e.clock.Add(abi.MaxDurationLimitS * time.Second)
	if _, err := e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "m-2", Seq: 1}, cred2)); err != nil {
		t.Fatalf("a report at the end of the longest game: %v", err)
	}
	e.clock.Add(backend.MatchCredentialTTL - abi.MaxDurationLimitS*time.Second)
	_, err = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "m-2", Seq: 2}, cred2))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestMatchResultsExactlyOnce(t *testing.T) { bothStores(t, testMatchExactlyOnce) }

// testWebhooks: a signed, retried, at-least-once delivery to a real server on
// 127.0.0.1, surviving a backend restart while leased.
func testWebhooks(t *testing.T, e *env) {
	tn, admin := e.createTenant("wh")
	var mu sync.Mutex
	var got []string
	fail := 2
	var secret string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		sig := r.Header.Get("Ludus-Signature")
		ts, mac, _ := strings.Cut(strings.TrimPrefix(sig, "t="), ",v1=")
		h := hmac.New(sha256.New, []byte(secret))
		h.Write([]byte(ts + "."))
		h.Write(body)
		if !hmac.Equal([]byte(hex.EncodeToString(h.Sum(nil))), []byte(mac)) {
			t.Errorf("bad signature %q", sig)
		}
		if fail > 0 {
			fail--
			w.WriteHeader(500)
			return
		}
		got = append(got, r.Header.Get("Ludus-Idempotency-Key"))
		var ev backend.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil || ev.MatchID != "wm" || ev.ID != r.Header.Get("Ludus-Idempotency-Key") {
			t.Errorf("event %s: %v", body, err)
		}
	}))
	defer hook.Close()
	if got, err := e.admin.GetWebhook(ctx, req(&ludusv1.GetWebhookRequest{}, admin)); err != nil || got.Msg.Url != "" {
		t.Fatalf("webhook before one is set: %v %v", got, err)
	}
	sw, err := e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: hook.URL + "/ludus"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.admin.GetWebhook(ctx, req(&ludusv1.GetWebhookRequest{}, admin)); err != nil || got.Msg.Url != hook.URL+"/ludus" {
		t.Fatalf("webhook read back: %v %v", got, err)
	}
	mu.Lock()
	secret = sw.Msg.Secret
	mu.Unlock()
	a, _ := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "w1"}, admin))
	cred := e.mint(tn.Id, "wm", "arena")
	rep := backend.NewMatchReporter(e.http.Client(), e.http.URL, "wm", cred)
	for range 2 {
		if _, err := rep.ReportResult(ctx, 0, []*ludusv1.PlayerResult{{AccountId: a.Msg.Account.Id, Score: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() *ludusv1.WebhookDelivery {
		ds, err := e.admin.ListWebhookDeliveries(ctx, req(&ludusv1.ListWebhookDeliveriesRequest{}, admin))
		if err != nil || len(ds.Msg.Deliveries) != 1 {
			t.Fatalf("deliveries: %v %v", ds, err)
		}
		return ds.Msg.Deliveries[0]
	}
	if n, err := e.srv.DeliverWebhooks(ctx); n != 1 || err != nil {
		t.Fatalf("first pass: %d %v", n, err)
	}
	if d := state(); d.State != "pending" || d.Attempts != 1 || d.LastError != "delivery failed: the endpoint answered HTTP 500, not 2xx" {
		t.Fatalf("after a failure: %v", d)
	}
	if n, _ := e.srv.DeliverWebhooks(ctx); n != 0 {
		t.Fatal("retried before the backoff")
	}
	e.clock.Add(2 * time.Second)
	e.srv.DeliverWebhooks(ctx)
	// Restart; the delivery is due again after its backoff.
	e.restart()
	e.clock.Add(10 * time.Second)
	if n, err := e.srv.DeliverWebhooks(ctx); n != 1 || err != nil {
		t.Fatalf("after restart: %d %v", n, err)
	}
	if d := state(); d.State != "delivered" || d.Attempts != 3 {
		t.Fatalf("final state: %v", d)
	}
	e.clock.Add(time.Hour)
	e.srv.DeliverWebhooks(ctx)
	// The finished delivery is kept for WebhookDeliveryRetention after its
	// last attempt (an hour ago), then swept.
	if n, err := e.srv.SweepWebhookDeliveries(ctx); n != 0 || err != nil {
		t.Fatalf("sweep an hour after delivery: %d, %v", n, err)
	}
	state()
	e.clock.Add(backend.WebhookDeliveryRetention - time.Hour + time.Second)
	if n, err := e.srv.SweepWebhookDeliveries(ctx); n != 1 || err != nil {
		t.Fatalf("sweep past the retention: %d, %v", n, err)
	}
	if ds, err := e.admin.ListWebhookDeliveries(ctx, req(&ludusv1.ListWebhookDeliveriesRequest{}, admin)); err != nil || len(ds.Msg.Deliveries) != 0 {
		t.Fatalf("deliveries after the sweep: %v %v", ds, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("delivered %d times, want 1", len(got))
	}
}

func TestWebhooks(t *testing.T) { bothStores(t, testWebhooks, allowPrivateWebhooks) }

// TestNastyInput: SQL metacharacters and oversized strings in every string
// field are stored verbatim or refused with InvalidArgument, never Internal.
func TestNastyInput(t *testing.T) {
	bothStores(t, func(t *testing.T, e *env) {
		tn, admin := e.createTenant("nasty")
		values := []string{`'; DROP TABLE accounts; --`, `" OR 1=1 --`, "a\x00b", strings.Repeat("x", 100_000), "ünï 🎮", `%_\*?[]`}
		a, _ := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "base"}, admin))
		id := a.Msg.Account.Id
		cred := e.mint(tn.Id, "nm", "arena")
		g := e.guestLogin("nasty", "device-nasty-0123456", "")
		for _, v := range values {
			calls := map[string]error{}
			_, calls["GuestLogin"] = e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: v, DeviceId: v, DisplayName: v}))
			_, calls["RegisterEmail"] = e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "nasty", Email: v + "@x.io", Password: v, DisplayName: v}))
			_, calls["EmailLogin"] = e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "nasty", Email: v, Password: v}))
			_, calls["CustomLogin"] = e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: v, DisplayName: v}, admin))
			_, calls["Refresh"] = e.auth.Refresh(ctx, connect.NewRequest(&ludusv1.RefreshRequest{Tenant: "nasty", RefreshToken: "ldr_" + v}))
			_, calls["Logout"] = e.auth.Logout(ctx, connect.NewRequest(&ludusv1.LogoutRequest{Tenant: v, RefreshToken: v}))
			_, calls["LinkDevice"] = e.auth.LinkDevice(ctx, req(&ludusv1.LinkDeviceRequest{DeviceId: v}, g.Ticket))
			_, calls["LinkEmail"] = e.auth.LinkEmail(ctx, req(&ludusv1.LinkEmailRequest{Email: v, Password: v}, g.Ticket))
			_, calls["CreateAPIKey"] = e.admin.CreateAPIKey(ctx, req(&ludusv1.CreateAPIKeyRequest{Scope: "read-only", Name: v}, admin))
			_, calls["RevokeAPIKey"] = e.admin.RevokeAPIKey(ctx, req(&ludusv1.RevokeAPIKeyRequest{Id: v}, admin))
			_, calls["CreateAccount"] = e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: v, Email: v, Password: v, DisplayName: v}, admin))
			_, calls["CreateAccountCustom"] = e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: v}, admin))
			_, calls["GetAccount"] = e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{CustomId: v}, admin))
			_, calls["GetAccountByID"] = e.admin.GetAccount(ctx, req(&ludusv1.GetAccountRequest{Id: v}, admin))
			_, calls["Grant"] = e.admin.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: id, IdempotencyKey: v, Reason: v,
				Currency: map[string]int64{v: 1}, Items: map[string]int64{v: 1}}, admin))
			_, calls["GrantKey"] = e.admin.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: id, IdempotencyKey: v, Xp: 1}, admin))
			_, calls["Leaderboard"] = e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: v}}, admin))
			_, calls["SetWebhook"] = e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: "https://example.com/?q=" + v}, admin))
			_, calls["Mint"] = e.modules.MintMatchCredential(ctx, req(&clusterv1.MintMatchCredentialRequest{TenantId: tn.Id, MatchId: v, Game: v}, clusterToken))
			_, calls["AddMatchPlayers"] = e.modules.AddMatchPlayers(ctx, req(&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: v, AccountIds: []string{id}}, clusterToken))
			_, calls["AddMatchPlayersAccount"] = e.modules.AddMatchPlayers(ctx, req(&clusterv1.AddMatchPlayersRequest{TenantId: v, MatchId: "nm", AccountIds: []string{v, id}}, clusterToken))
			_, calls["ReportProgress"] = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "nm", Seq: 1,
				Players: []*ludusv1.PlayerResult{{AccountId: v, Currency: map[string]int64{v: 1}, ItemsUsed: map[string]int64{v: 1}}}}, cred))
			_, calls["ReportProgressMatch"] = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: v, Seq: 1}, cred))
			_, calls["ArchiveGame"] = e.modules.ArchiveGame(ctx, req(&clusterv1.ArchiveGameRequest{TenantId: tn.Id, GameId: v, SpecJson: []byte(v),
				Chunks: [][]byte{[]byte(v)}, State: v, Message: v}, clusterToken))
			_, calls["ArchiveGameMessage"] = e.modules.ArchiveGame(ctx, req(&clusterv1.ArchiveGameRequest{TenantId: tn.Id, GameId: "g-nasty",
				SpecJson: []byte(v), Chunks: [][]byte{[]byte(v)}, State: "failed", Message: v}, clusterToken))
			_, calls["GetGameLog"] = e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: v}, admin))
			for name, err := range calls {
				if code := connect.CodeOf(err); err != nil && (code == connect.CodeInternal || code == connect.CodeUnknown) {
					t.Errorf("%s(%q): %v", name, clipTest(v), err)
				}
			}
		}
		if strings.Contains(e.logs.String(), "level=ERROR") {
			t.Errorf("server errors logged:\n%s", e.logs.String())
		}
	})
}

func clipTest(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

var _ ludusv1connect.MatchReportServiceClient = nil

// Password work is bounded (Config.PasswordWorkers): with every turn taken,
// EmailLogin, of an unknown email too, and RegisterEmail wait, then get
// Unavailable, storing nothing; LinkEmail without a ticket is refused before
// any hashing. With the turns back, everything works.
func TestPasswordWorkIsBounded(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { backend.SetPasswordWait(c, 50*time.Millisecond) })
	e.createTenant("pw")
	release := backend.HoldPasswordTurns(e.srv)
	_, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "pw", Email: "nobody@example.com", Password: "whatever1"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "try again in a few seconds") {
		t.Fatalf("EmailLogin with every password turn taken: %v, want Unavailable", err)
	}
	register := func() error {
		_, err := e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "pw", Email: "ann@example.com", Password: "correct horse"}))
		return err
	}
	if err := register(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("RegisterEmail with every password turn taken: %v, want Unavailable", err)
	}
	_, err = e.auth.LinkEmail(ctx, connect.NewRequest(&ludusv1.LinkEmailRequest{Email: "eve@example.com", Password: "password1"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("LinkEmail without a ticket: %v, want Unauthenticated before any hashing", err)
	}
	release()
	if err := register(); err != nil {
		t.Fatalf("RegisterEmail once the turns are back (the refused one stored nothing): %v", err)
	}
	_, err = e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "pw", Email: "ann@example.com", Password: "correct horse"}))
	if err != nil {
		t.Fatalf("EmailLogin: %v", err)
	}
}
