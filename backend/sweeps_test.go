package backend_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// TestSweepDeletesExpiredRefreshTokens: a sweep deletes the refresh tokens
// past their expiry (used ones too), and only those: a token presented
// after its sweep is refused as an expired one was, the family's newer
// token still works, and a sweep with nothing expired deletes nothing.
func TestSweepDeletesExpiredRefreshTokens(t *testing.T) {
	e := newEnv(t)
	e.createTenant("sw")
	refresh := func(tok string) (*ludusv1.Session, error) { return e.refresh("sw", tok) }
	sweep := func(want int) {
		t.Helper()
		n, err := e.srv.SweepRefreshTokens(ctx)
		if err != nil || n != want {
			t.Fatalf("sweep at %v: deleted %d, %v; want %d", e.clock.Now(), n, err, want)
		}
	}

	a0 := e.guestLogin("sw", "device-sw-a-0123456789", "").RefreshToken // expires at day 30
	sweep(0)
	e.clock.Add(10 * 24 * time.Hour)
	a1, err := refresh(a0) // a0 used (kept until day 30: its reuse revokes the family); a1 expires at day 40
	if err != nil {
		t.Fatal(err)
	}
	b0 := e.guestLogin("sw", "device-sw-b-0123456789", "").RefreshToken // expires at day 40
	sweep(0)

	e.clock.Add(backend.RefreshTTL - 10*24*time.Hour + time.Second) // day 30 and a second
	sweep(1)                                                        // a0
	_, err = refresh(a0)
	wantCode(t, err, connect.CodeUnauthenticated)
	a2, err := refresh(a1.RefreshToken) // the family lives on: a0's sweep revoked nothing
	if err != nil {
		t.Fatalf("the family's live token after the sweep: %v", err)
	}
	sweep(0)

	e.clock.Add(10 * 24 * time.Hour) // day 40 and a second: a1 (used) and b0 expire
	sweep(2)
	_, err = refresh(b0)
	wantCode(t, err, connect.CodeUnauthenticated)
	if _, err := refresh(a2.RefreshToken); err != nil { // expires at day 60
		t.Fatalf("a token 20 days from its expiry: %v", err)
	}
}

// TestSweepsRun: RunSweeps sweeps at once and stops with its context.
func TestSweepsRun(t *testing.T) {
	e := newEnv(t)
	e.createTenant("swr")
	e.guestLogin("swr", "device-swr-0123456789", "")
	e.clock.Add(backend.RefreshTTL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.srv.RunSweeps(ctx, time.Hour)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(e.logs.String(), "deleted expired refresh tokens") {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep within 10 s; logs:\n%s", e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := e.srv.SweepRefreshTokens(ctx); err != nil || n != 0 {
		t.Fatalf("after RunSweeps's first sweep: deleted %d more, %v", n, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunSweeps did not return after its context ended")
	}
}

// TestSweepDeletesStaleLoginThrottles: failed email logins leave a throttle
// (for a made-up email too); a sweep keeps it while it counts and deletes
// it once its window has passed, after which the email has its free
// attempts again, as it had before the sweep.
func TestSweepDeletesStaleLoginThrottles(t *testing.T) {
	e := newEnv(t)
	e.createTenant("swt")
	if _, err := e.auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "swt", Email: "ann@example.com", Password: "the right one"})); err != nil {
		t.Fatal(err)
	}
	fail := func(email string) {
		t.Helper()
		_, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "swt", Email: email, Password: "a wrong one"}))
		wantCode(t, err, connect.CodeUnauthenticated, "wrong email or password")
	}
	for range backend.ThrottleFreeFailures {
		fail("ann@example.com")
	}
	fail("nobody@example.com")
	if n, err := e.srv.SweepLoginThrottles(ctx); n != 0 || err != nil {
		t.Fatalf("sweep while the failures count: %d, %v", n, err)
	}
	_, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "swt", Email: "ann@example.com", Password: "a wrong one"}))
	wantCode(t, err, connect.CodeResourceExhausted, "retry in")

	e.clock.Add(backend.ThrottleWindow + time.Second)
	if n, err := e.srv.SweepLoginThrottles(ctx); n != 2 || err != nil {
		t.Fatalf("sweep after the window: %d, %v; want 2", n, err)
	}
	for range backend.ThrottleFreeFailures { // free again: no "retry in"
		fail("ann@example.com")
	}
	e.clock.Add(2 * time.Second) // past the delay the third failure set
	if _, err := e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "swt", Email: "ann@example.com", Password: "the right one"})); err != nil {
		t.Fatalf("the right password after the sweep: %v", err)
	}
}

// TestSweepEndsSurplusSessions: an account that signed in more than
// MaxRefreshFamilies times keeps its newest sessions after a sweep; the
// older ones must sign in again, the kept ones refresh as before, other
// accounts lose nothing, and RunSweeps does it.
func TestSweepEndsSurplusSessions(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { c.SignInsPerAccount = backend.NoLimit })
	e.createTenant("sf")
	const extra = 5
	var tokens []string
	for range backend.MaxRefreshFamilies + extra {
		tokens = append(tokens, e.guestLogin("sf", "device-sf-0123456789", "").RefreshToken)
		e.clock.Add(time.Second)
	}
	other := e.guestLogin("sf", "device-sf-other-456789", "").RefreshToken
	n, err := e.srv.SweepRefreshFamilies(ctx)
	if err != nil || n != extra {
		t.Fatalf("sweep: deleted %d, %v; want %d", n, err, extra)
	}
	for i, tok := range tokens {
		_, err := e.refresh("sf", tok)
		if i < extra {
			wantCode(t, err, connect.CodeUnauthenticated, "sign in again")
		} else if err != nil {
			t.Fatalf("session %d of %d, kept: %v", i, len(tokens), err)
		}
	}
	if _, err := e.refresh("sf", other); err != nil {
		t.Fatalf("another account's session: %v", err)
	}
	if n, err := e.srv.SweepRefreshFamilies(ctx); err != nil || n != 0 {
		t.Fatalf("a second sweep: deleted %d, %v", n, err)
	}

	for range 3 {
		e.guestLogin("sf", "device-sf-0123456789", "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.srv.RunSweeps(ctx, time.Hour)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(e.logs.String(), "deleted surplus sessions' refresh tokens") {
		if time.Now().After(deadline) {
			t.Fatalf("RunSweeps trimmed no session within 10 s; logs:\n%s", e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSweepDeletesUnreportedMatches: a match registered for a game that
// never reported (no node took it) is deleted once its credential has
// expired, and not before; RunSweeps includes the sweep.
func TestSweepDeletesUnreportedMatches(t *testing.T) {
	e := newEnv(t)
	tn, _ := e.createTenant("um")
	if _, _, err := e.srv.MintMatchCredential(ctx, tn.Id, "um-match-1", "arena"); err != nil {
		t.Fatal(err)
	}
	sweep := func(want int) {
		t.Helper()
		if n, err := e.srv.SweepUnreportedMatches(ctx); err != nil || n != want {
			t.Fatalf("sweep at %v: deleted %d, %v; want %d", e.clock.Now(), n, err, want)
		}
	}
	sweep(0)
	e.clock.Add(backend.MatchCredentialTTL - time.Second)
	sweep(0) // it may still report
	_, _, err := e.srv.MintMatchCredential(ctx, tn.Id, "um-match-1", "arena")
	wantCode(t, err, connect.CodeAlreadyExists)
	e.clock.Add(time.Second)
	sweep(1)
	// The id is free again: nothing of the match is left.
	if _, _, err := e.srv.MintMatchCredential(ctx, tn.Id, "um-match-1", "arena"); err != nil {
		t.Fatalf("the id after the sweep: %v", err)
	}
}
