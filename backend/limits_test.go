package backend_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// TestWebhookRedirectsAndErrorText: with private webhooks allowed (dev), a
// redirect is not followed, and a failed attempt's text names no address.
func TestWebhookRedirectsAndErrorText(t *testing.T) {
	e := newEnv(t, allowPrivateWebhooks)
	tn, admin := e.createTenant("redir")
	var target, redirects atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { target.Add(1) }))
	defer inner.Close()
	outer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirects.Add(1)
		http.Redirect(w, r, inner.URL+"/internal", http.StatusTemporaryRedirect)
	}))
	defer outer.Close()
	if _, err := e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: outer.URL + "/hook"}, admin)); err != nil {
		t.Fatalf("loopback webhook with AllowPrivateWebhooks: %v", err)
	}
	acc, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "x1"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []string{"m-redirect", "m-closed"} {
		cred := e.mint(tn.Id, m, "arena")
		if _, err := backend.NewMatchReporter(e.http.Client(), e.http.URL, m, cred).ReportResult(ctx, 0,
			[]*ludusv1.PlayerResult{{AccountId: acc.Msg.Account.Id, Score: int64(i)}}); err != nil {
			t.Fatal(err)
		}
		if n, err := e.srv.DeliverWebhooks(ctx); n != 1 || err != nil {
			t.Fatalf("DeliverWebhooks: %d, %v", n, err)
		}
		if i == 0 {
			// Next: a port nothing listens on.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := "http://" + ln.Addr().String() + "/hook"
			ln.Close()
			if _, err := e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: closed}, admin)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if redirects.Load() != 1 || target.Load() != 0 {
		t.Errorf("redirect followed: %d redirects, %d requests to its target", redirects.Load(), target.Load())
	}
	ds, err := e.admin.ListWebhookDeliveries(ctx, req(&ludusv1.ListWebhookDeliveriesRequest{}, admin))
	if err != nil || len(ds.Msg.Deliveries) != 2 {
		t.Fatalf("deliveries: %v, %v", ds, err)
	}
	errs := map[string]bool{}
	for _, d := range ds.Msg.Deliveries {
		errs[d.LastError] = true
		if strings.Contains(d.LastError, "127.0.0.1") || strings.Contains(d.LastError, "refused") || strings.Contains(d.LastError, "dial") {
			t.Errorf("delivery error shows the tenant %q", d.LastError)
		}
	}
	for _, want := range []string{"delivery failed: the endpoint answered HTTP 307, not 2xx (redirects are not followed)",
		"delivery failed: the endpoint could not be reached or did not answer in time"} {
		if !errs[want] {
			t.Errorf("no delivery failed with %q: %v", want, errs)
		}
	}
	if !strings.Contains(e.logs.String(), "connection refused") {
		t.Errorf("the dial error is not in the log:\n%s", e.logs.String())
	}
}

// TestSignupLimitsConfig: the per-tenant limit counts every way of creating
// an account; limits can be turned off; X-Forwarded-For counts only from a
// trusted proxy.
func TestSignupLimitsConfig(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) {
		c.SignupsPerAddress = backend.NoLimit
		c.SignupsPerTenant = backend.RateLimit{PerMinute: 60, Burst: 4}
	})
	_, admin := e.createTenant("tl")
	server := e.apiKey(admin, "server")
	guest := func(dev string) error {
		_, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "tl", DeviceId: dev}))
		return err
	}
	custom := func(id string) error {
		_, err := e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: id}, server))
		return err
	}
	for _, err := range []error{guest("tl-device-00000001"), custom("c1"), guest("tl-device-00000002")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "c2"}, admin)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, custom("c3"), connect.CodeResourceExhausted, "in this game right now", "retry in 1 s")
	wantCode(t, guest("tl-device-00000003"), connect.CodeResourceExhausted, "retry in 1 s")
	_, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "c3"}, admin))
	wantCode(t, err, connect.CodeResourceExhausted)
	// A failed creation gives its token back; existing accounts sign in.
	for _, err := range []error{custom("c1"), custom("c2"), guest("tl-device-00000001")} {
		if err != nil {
			t.Fatalf("existing account: %v", err)
		}
	}

	// No trusted proxy: X-Forwarded-For is the client's claim, ignored.
	e2 := newEnv(t, func(c *backend.Config) {
		c.TrustedProxies = []netip.Prefix{}
		c.SignupsPerAddress = backend.RateLimit{PerMinute: 1, Burst: 2}
		c.SignupsPerTenant = backend.NoLimit
	})
	e2.createTenant("tp")
	for i := range 3 {
		r := connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "tp", DeviceId: fmt.Sprintf("tp-device-%08d", i)})
		r.Header().Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		_, err := e2.auth.GuestLogin(ctx, r)
		if i < 2 && err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			wantCode(t, err, connect.CodeResourceExhausted, "from your network address", "retry in 60 s")
		}
	}

	// Both off: no limit at all.
	e3 := newEnv(t, func(c *backend.Config) { c.SignupsPerAddress, c.SignupsPerTenant = backend.NoLimit, backend.NoLimit })
	e3.createTenant("nl")
	for i := range 150 {
		if _, err := e3.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "nl", DeviceId: fmt.Sprintf("nl-device-%08d", i)})); err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
	}
}

// TestSignInLimit: sign-ins to an existing account are limited per account
// (by its device, email or custom id) with a retry hint; creating the
// account does not count, other accounts are not held back, Refresh is
// not limited, and the bucket refills with time.
func TestSignInLimit(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { c.SignInsPerAccount = backend.RateLimit{PerMinute: 6, Burst: 3} })
	_, admin := e.createTenant("si")
	server := e.apiKey(admin, "server")
	guest := func(dev string) (*ludusv1.GuestLoginResponse, error) {
		r, err := e.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "si", DeviceId: dev}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	email := func(password string) error {
		_, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "si", Email: "si@example.com", Password: password}))
		return err
	}
	custom := func(id string) error {
		_, err := e.auth.CustomLogin(ctx, req(&ludusv1.CustomLoginRequest{CustomId: id}, server))
		return err
	}
	if _, err := e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "si", Email: "si@example.com", Password: "correct horse battery"})); err != nil {
		t.Fatal(err)
	}
	// The first of each creates the account (not counted), then three
	// sign-ins each, the burst.
	var last *ludusv1.GuestLoginResponse
	for i := range 4 {
		var err error
		if last, err = guest("si-device-00000001"); err != nil {
			t.Fatalf("guest sign-in %d: %v", i, err)
		}
		if err := custom("si-custom"); err != nil {
			t.Fatalf("custom sign-in %d: %v", i, err)
		}
		if i < 3 {
			if err := email("correct horse battery"); err != nil {
				t.Fatalf("email sign-in %d: %v", i, err)
			}
		}
	}
	_, err := guest("si-device-00000001")
	wantCode(t, err, connect.CodeResourceExhausted, "too many sign-ins to this account", "retry in 10 s", "call Refresh")
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Meta().Get("Retry-After") != "10" {
		t.Errorf("Retry-After = %q, want 10", ce.Meta().Get("Retry-After"))
	}
	wantCode(t, custom("si-custom"), connect.CodeResourceExhausted, "too many sign-ins to this account")
	// Refused before the password is checked: a wrong one is not counted
	// as a failure either.
	wantCode(t, email("wrong password"), connect.CodeResourceExhausted, "too many sign-ins to this account")
	// Other accounts sign in; the held one renews its ticket with Refresh.
	if _, err := guest("si-device-00000002"); err != nil {
		t.Fatalf("another device: %v", err)
	}
	tok := last.RefreshToken
	for i := range 10 {
		s, err := e.refresh("si", tok)
		if err != nil {
			t.Fatalf("refresh %d while sign-ins are held: %v", i, err)
		}
		tok = s.RefreshToken
	}
	// Ten seconds refill one sign-in (6 a minute).
	e.clock.Add(10 * time.Second)
	if _, err := guest("si-device-00000001"); err != nil {
		t.Fatalf("after 10 s: %v", err)
	}
	_, err = guest("si-device-00000001")
	wantCode(t, err, connect.CodeResourceExhausted, "retry in 10 s")
	if err := email("correct horse battery"); err != nil {
		t.Fatalf("email after 10 s: %v", err)
	}

	// The default: 20 at once.
	d := newEnv(t)
	d.createTenant("sd")
	for range 1 + backend.DefaultSignInsPerAccount.Burst {
		d.guestLogin("sd", "sd-device-00000001", "")
	}
	_, err = d.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "sd", DeviceId: "sd-device-00000001"}))
	wantCode(t, err, connect.CodeResourceExhausted, "too many sign-ins to this account")
	// NoLimit turns it off.
	n := newEnv(t, func(c *backend.Config) { c.SignInsPerAccount = backend.NoLimit })
	n.createTenant("sn")
	for range 50 {
		n.guestLogin("sn", "sn-device-00000001", "")
	}
}

// TestLeaderboardReadLimit: a player's GetLeaderboard calls are limited per
// account, with the wait; other players and admin reads are not held back,
// and the bucket refills with time.
func TestLeaderboardReadLimit(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { c.LeaderboardReadsPerAccount = backend.RateLimit{PerMinute: 6, Burst: 2} })
	_, admin := e.createTenant("lb")
	ada := e.guestLogin("lb", "lb-device-00000001", "Ada")
	bob := e.guestLogin("lb", "lb-device-00000002", "Bob")
	read := func(ticket string) error {
		_, err := e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}}, ticket))
		return err
	}
	for i := range 2 {
		if err := read(ada.Ticket); err != nil {
			t.Fatalf("read %d of the burst: %v", i, err)
		}
	}
	err := read(ada.Ticket)
	wantCode(t, err, connect.CodeResourceExhausted, "too many leaderboard reads by this account", "retry in 10 s")
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Meta().Get("Retry-After") != "10" {
		t.Errorf("Retry-After = %q, want 10", ce.Meta().Get("Retry-After"))
	}
	if err := read(bob.Ticket); err != nil {
		t.Fatalf("another player: %v", err)
	}
	for i := range 5 {
		if _, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}}, admin)); err != nil {
			t.Fatalf("admin read %d: %v", i, err)
		}
	}
	e.clock.Add(10 * time.Second)
	if err := read(ada.Ticket); err != nil {
		t.Fatalf("10 s later: %v", err)
	}
}
