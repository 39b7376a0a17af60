package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for API keys, accounts and their identities, login throttling and refresh tokens.

func mustAccount(t *testing.T, s store.Store, tenantID, device string) store.Account {
	t.Helper()
	a := store.Account{ID: id("a_"), TenantID: tenantID, DeviceID: device, DisplayName: "p " + device, CreatedAt: base, UpdatedAt: base}
	must(t, "CreateAccount", s.CreateAccount(context.Background(), a))
	return a
}

func testAPIKeyLifecycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, b := mustTenant(t, s, "ka"), mustTenant(t, s, "kb")
	k1 := store.APIKey{ID: id("k_"), TenantID: a.ID, Hash: hash("k1"), Scope: "admin", Name: "ci", CreatedAt: base}
	k2 := store.APIKey{ID: id("k_"), TenantID: a.ID, Hash: hash("k2"), Scope: "read-only", CreatedAt: base.Add(time.Second)}
	must(t, "create k1", s.CreateAPIKey(ctx, k1))
	must(t, "create k2", s.CreateAPIKey(ctx, k2))
	ks, err := s.ListAPIKeys(ctx, a.ID)
	must(t, "list", err)
	if len(ks) != 2 || ks[0].ID != k1.ID || ks[0].Name != "ci" || ks[1].Scope != "read-only" {
		t.Fatalf("ListAPIKeys = %+v", ks)
	}
	if ks, _ := s.ListAPIKeys(ctx, b.ID); len(ks) != 0 {
		t.Fatalf("other tenant sees %d keys", len(ks))
	}
	// Another tenant cannot rotate or revoke a's keys.
	k3 := store.APIKey{ID: id("k_"), TenantID: b.ID, Hash: hash("k3"), Scope: "admin", CreatedAt: base}
	wantErr(t, "replace other tenant's key", s.ReplaceAPIKey(ctx, b.ID, k1.ID, k3), store.ErrNotFound)
	wantErr(t, "delete other tenant's key", s.DeleteAPIKey(ctx, b.ID, k1.ID), store.ErrNotFound)
	// Rotate k1.
	k1b := store.APIKey{ID: id("k_"), TenantID: a.ID, Hash: hash("k1b"), Scope: "admin", Name: "ci", CreatedAt: base.Add(2 * time.Second)}
	must(t, "replace", s.ReplaceAPIKey(ctx, a.ID, k1.ID, k1b))
	_, err = s.APIKeyByHash(ctx, hash("k1"))
	wantErr(t, "old key after rotate", err, store.ErrNotFound)
	if got, err := s.APIKeyByHash(ctx, hash("k1b")); err != nil || got.ID != k1b.ID {
		t.Fatalf("new key: %+v %v", got, err)
	}
	// A failed replace (hash taken) keeps the old key.
	bad := store.APIKey{ID: id("k_"), TenantID: a.ID, Hash: hash("k2"), Scope: "admin", CreatedAt: base}
	wantErr(t, "replace with taken hash", s.ReplaceAPIKey(ctx, a.ID, k1b.ID, bad), store.ErrAlreadyExists)
	if _, err := s.APIKeyByHash(ctx, hash("k1b")); err != nil {
		t.Fatalf("failed replace lost the old key: %v", err)
	}
	must(t, "delete", s.DeleteAPIKey(ctx, a.ID, k2.ID))
	wantErr(t, "delete twice", s.DeleteAPIKey(ctx, a.ID, k2.ID), store.ErrNotFound)
	_, err = s.APIKeyByHash(ctx, hash("k2"))
	wantErr(t, "revoked key", err, store.ErrNotFound)
}

func testAccountIdentities(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "ids"), mustTenant(t, s, "ids2")
	a := store.Account{ID: id("a_"), TenantID: tn.ID, Email: "a@example.com", PasswordHash: "$argon2id$x", DisplayName: "A", CreatedAt: base, UpdatedAt: base}
	must(t, "create email account", s.CreateAccount(ctx, a))
	b := store.Account{ID: id("a_"), TenantID: tn.ID, CustomID: "studio-42", DisplayName: "B", CreatedAt: base, UpdatedAt: base}
	must(t, "create custom account", s.CreateAccount(ctx, b))
	got, err := s.AccountByEmail(ctx, tn.ID, "a@example.com")
	must(t, "by email", err)
	if got.ID != a.ID || got.PasswordHash != a.PasswordHash || got.DeviceID != "" || got.CustomID != "" {
		t.Fatalf("by email = %+v", got)
	}
	got, err = s.AccountByCustomID(ctx, tn.ID, "studio-42")
	must(t, "by custom id", err)
	if got.ID != b.ID || got.Email != "" {
		t.Fatalf("by custom = %+v", got)
	}
	_, err = s.AccountByEmail(ctx, other.ID, "a@example.com")
	wantErr(t, "email in other tenant", err, store.ErrNotFound)
	_, err = s.AccountByCustomID(ctx, other.ID, "studio-42")
	wantErr(t, "custom id in other tenant", err, store.ErrNotFound)
	// The same email in another tenant is another account.
	must(t, "same email other tenant", s.CreateAccount(ctx, store.Account{ID: id("a_"), TenantID: other.ID, Email: "a@example.com", DisplayName: "x", CreatedAt: base, UpdatedAt: base}))
	dup := store.Account{ID: id("a_"), TenantID: tn.ID, Email: "a@example.com", DisplayName: "dup", CreatedAt: base, UpdatedAt: base}
	wantErr(t, "duplicate email", s.CreateAccount(ctx, dup), store.ErrAlreadyExists)

	// Link a device and the custom id's... taken custom id fails; unlink email.
	a.DeviceID, a.UpdatedAt = "device-aaaaaaaaaaaa", base.Add(time.Minute)
	must(t, "link device", s.UpdateAccount(ctx, a))
	a2 := a
	a2.CustomID = "studio-42"
	wantErr(t, "link taken custom id", s.UpdateAccount(ctx, a2), store.ErrAlreadyExists)
	a.Email, a.PasswordHash = "", ""
	must(t, "unlink email", s.UpdateAccount(ctx, a))
	got, err = s.AccountByDevice(ctx, tn.ID, "device-aaaaaaaaaaaa")
	must(t, "by device", err)
	if got.ID != a.ID || got.Email != "" || got.PasswordHash != "" || !sameTime(got.UpdatedAt, a.UpdatedAt) {
		t.Fatalf("after update = %+v", got)
	}
	_, err = s.AccountByEmail(ctx, tn.ID, "a@example.com")
	wantErr(t, "unlinked email", err, store.ErrNotFound)
	// Cross-tenant update and delete touch nothing.
	x := a
	x.TenantID = other.ID
	wantErr(t, "update in other tenant", s.UpdateAccount(ctx, x), store.ErrNotFound)
	wantErr(t, "delete in other tenant", s.DeleteAccount(ctx, other.ID, a.ID), store.ErrNotFound)
	must(t, "delete", s.DeleteAccount(ctx, tn.ID, a.ID))
	_, err = s.AccountByID(ctx, tn.ID, a.ID)
	wantErr(t, "deleted account", err, store.ErrNotFound)
}

func testLoginThrottle(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "thr")
	got, err := s.LoginThrottle(ctx, tn.ID, "email:a@b")
	if err != nil || got != (store.LoginThrottle{}) {
		t.Fatalf("fresh throttle = %+v, %v", got, err)
	}
	th := store.LoginThrottle{Failures: 3, LastFailure: base, LockedUntil: base.Add(time.Minute)}
	must(t, "put", s.PutLoginThrottle(ctx, tn.ID, "email:a@b", th))
	got, err = s.LoginThrottle(ctx, tn.ID, "email:a@b")
	must(t, "get", err)
	if got.Failures != 3 || !sameTime(got.LastFailure, base) || !sameTime(got.LockedUntil, th.LockedUntil) {
		t.Fatalf("throttle = %+v", got)
	}
	th.Failures = 4
	must(t, "put again", s.PutLoginThrottle(ctx, tn.ID, "email:a@b", th))
	if got, _ := s.LoginThrottle(ctx, tn.ID, "email:a@b"); got.Failures != 4 {
		t.Fatalf("after update = %+v", got)
	}
	must(t, "reset", s.PutLoginThrottle(ctx, tn.ID, "email:a@b", store.LoginThrottle{}))
	if got, _ := s.LoginThrottle(ctx, tn.ID, "email:a@b"); got != (store.LoginThrottle{}) {
		t.Fatalf("after reset = %+v", got)
	}
}

// testLoginThrottleSweep: DeleteStaleLoginThrottles deletes, in every
// tenant and up to its limit, the throttles whose last failure is old and
// whose lockout (if any) has ended, and keeps the others.
func testLoginThrottleSweep(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "ths"), mustTenant(t, s, "ths2")
	put := func(tenant, key string, th store.LoginThrottle) {
		t.Helper()
		must(t, "put "+key, s.PutLoginThrottle(ctx, tenant, key, th))
	}
	put(tn.ID, "email:old", store.LoginThrottle{Failures: 2, LastFailure: base})
	put(other.ID, "email:old", store.LoginThrottle{Failures: 1, LastFailure: base})
	put(tn.ID, "email:locked", store.LoginThrottle{Failures: 10, LastFailure: base, LockedUntil: base.Add(15 * time.Minute)})
	put(tn.ID, "email:recent", store.LoginThrottle{Failures: 1, LastFailure: base.Add(10 * time.Minute)})
	left := func(tenant string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if got, err := s.LoginThrottle(ctx, tenant, k); err != nil || got == (store.LoginThrottle{}) {
				t.Fatalf("throttle %s: %+v, %v; want it kept", k, got, err)
			}
		}
	}
	gone := func(tenant string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if got, err := s.LoginThrottle(ctx, tenant, k); err != nil || got != (store.LoginThrottle{}) {
				t.Fatalf("throttle %s: %+v, %v; want it deleted", k, got, err)
			}
		}
	}
	del := func(failedBefore, now time.Duration, limit, want int) {
		t.Helper()
		n, err := s.DeleteStaleLoginThrottles(ctx, base.Add(failedBefore), base.Add(now), limit)
		if err != nil || n != want {
			t.Fatalf("DeleteStaleLoginThrottles(base+%v, base+%v, %d) = %d, %v; want %d", failedBefore, now, limit, n, err, want)
		}
	}
	del(0, 14*time.Minute, 10, 0) // no failure before base
	// At base+14m, failures before base+1s: the two "old" ones; the lockout
	// still runs.
	del(time.Second, 14*time.Minute, 1, 1)
	del(time.Second, 14*time.Minute, 10, 1)
	gone(tn.ID, "email:old")
	gone(other.ID, "email:old")
	left(tn.ID, "email:locked", "email:recent")
	del(time.Second, 16*time.Minute, 10, 1) // the lockout ended at base+15m
	gone(tn.ID, "email:locked")
	left(tn.ID, "email:recent")
	del(11*time.Minute, 30*time.Minute, 10, 1)
	gone(tn.ID, "email:recent")
}

func refresh(h string, at time.Time) store.RefreshToken {
	return store.RefreshToken{Hash: hash(h), CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
}

func testRefreshTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rt")
	a := mustAccount(t, s, tn.ID, "dev-rt-000000000")
	first := refresh("r0", base)
	first.FamilyID, first.TenantID, first.AccountID = "f1", tn.ID, a.ID
	must(t, "create", s.CreateRefreshToken(ctx, first))
	old, err := s.UseRefreshToken(ctx, hash("r0"), base.Add(time.Second), refresh("r1", base.Add(time.Second)))
	must(t, "use r0", err)
	if old.AccountID != a.ID || old.TenantID != tn.ID || old.FamilyID != "f1" {
		t.Fatalf("used token = %+v", old)
	}
	_, err = s.UseRefreshToken(ctx, hash("r1"), base.Add(2*time.Second), refresh("r2", base.Add(2*time.Second)))
	must(t, "use r1", err)
	// Reuse of r0: the family (r2 too) is revoked.
	_, err = s.UseRefreshToken(ctx, hash("r0"), base.Add(3*time.Second), refresh("rx", base))
	wantErr(t, "reuse r0", err, store.ErrRefreshReused)
	_, err = s.UseRefreshToken(ctx, hash("r2"), base.Add(4*time.Second), refresh("r3", base))
	wantErr(t, "r2 after family revoked", err, store.ErrRevoked)
	_, err = s.UseRefreshToken(ctx, hash("rx"), base.Add(4*time.Second), refresh("r4", base))
	wantErr(t, "token minted by the reuse", err, store.ErrNotFound)
	_, err = s.UseRefreshToken(ctx, hash("nope"), base, refresh("r5", base))
	wantErr(t, "unknown", err, store.ErrNotFound)

	// Expiry, and logout revoking a family.
	second := refresh("s0", base)
	second.FamilyID, second.TenantID, second.AccountID = "f2", tn.ID, a.ID
	must(t, "create s0", s.CreateRefreshToken(ctx, second))
	_, err = s.UseRefreshToken(ctx, hash("s0"), base.Add(2*time.Hour), refresh("s1", base))
	wantErr(t, "expired", err, store.ErrRevoked)
	third := refresh("u0", base)
	third.FamilyID, third.TenantID, third.AccountID = "f3", tn.ID, a.ID
	must(t, "create u0", s.CreateRefreshToken(ctx, third))
	must(t, "logout", s.RevokeRefreshFamily(ctx, hash("u0")))
	_, err = s.UseRefreshToken(ctx, hash("u0"), base.Add(time.Second), refresh("u1", base))
	wantErr(t, "after logout", err, store.ErrRevoked)
	wantErr(t, "logout unknown", s.RevokeRefreshFamily(ctx, hash("zzz")), store.ErrNotFound)

	// Revoking an account's tokens ends all its sessions and no other
	// account's; named under another tenant, it revokes nothing.
	other := mustAccount(t, s, tn.ID, "dev-rt-other-0000")
	for i, acc := range []store.Account{a, a, other} {
		r := refresh(fmt.Sprintf("v%d", i), base)
		r.FamilyID, r.TenantID, r.AccountID = fmt.Sprintf("fv%d", i), tn.ID, acc.ID
		must(t, "create v", s.CreateRefreshToken(ctx, r))
	}
	elsewhere := mustTenant(t, s, "rt-elsewhere")
	must(t, "revoke under another tenant", s.RevokeAccountRefreshTokens(ctx, elsewhere.ID, a.ID))
	_, err = s.UseRefreshToken(ctx, hash("v0"), base.Add(time.Second), refresh("v0b", base))
	must(t, "a token after a revocation under another tenant", err)
	must(t, "revoke account", s.RevokeAccountRefreshTokens(ctx, tn.ID, a.ID))
	_, err = s.UseRefreshToken(ctx, hash("v1"), base.Add(time.Second), refresh("v1b", base))
	wantErr(t, "a session of the revoked account", err, store.ErrRevoked)
	_, err = s.UseRefreshToken(ctx, hash("v0b"), base.Add(2*time.Second), refresh("v0c", base))
	wantErr(t, "the revoked account's newest token", err, store.ErrRevoked)
	_, err = s.UseRefreshToken(ctx, hash("v2"), base.Add(time.Second), refresh("v2b", base))
	must(t, "another account's session", err)
}

// testRefreshTokenExpiry: DeleteExpiredRefreshTokens deletes the tokens
// expired at now (used, revoked or neither), oldest first, up to its limit,
// and none other; the tokens left keep working, reuse detection and family
// revocation included.
func testRefreshTokenExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rte")
	a := mustAccount(t, s, tn.ID, "dev-rte-00000000")
	b := mustAccount(t, s, tn.ID, "dev-rte-00000001")
	mk := func(h, family string, acc store.Account, created time.Time) {
		t.Helper()
		r := refresh(h, created) // expires an hour after created
		r.FamilyID, r.TenantID, r.AccountID = family, tn.ID, acc.ID
		must(t, "create "+h, s.CreateRefreshToken(ctx, r))
	}
	mk("e0", "fe", a, base)                                                                                      // used below, expires at base+1h
	mk("e2", "fg", b, base.Add(2*time.Minute))                                                                   // revoked below, expires at base+1h2m
	mk("e3", "fh", b, base.Add(3*time.Minute))                                                                   // plain, expires at base+1h3m
	mk("e9", "fi", a, base.Add(2*time.Hour))                                                                     // expires at base+3h
	_, err := s.UseRefreshToken(ctx, hash("e0"), base.Add(time.Minute), refresh("e1", base.Add(90*time.Minute))) // e1: fe, expires at base+2h30m
	must(t, "use e0", err)
	must(t, "revoke e2", s.RevokeRefreshFamily(ctx, hash("e2")))

	del := func(now time.Time, limit, want int) {
		t.Helper()
		n, err := s.DeleteExpiredRefreshTokens(ctx, now, limit)
		if err != nil || n != want {
			t.Fatalf("DeleteExpiredRefreshTokens(%v, %d) = %d, %v; want %d", now.Sub(base), limit, n, err, want)
		}
	}
	del(base.Add(time.Hour-time.Second), 10, 0) // nothing expired yet
	// At base+1h10m e0, e2 and e3 have expired; a limit of 2 takes the
	// two oldest (e0, e2), then e3.
	at := base.Add(70 * time.Minute)
	del(at, 2, 2)
	_, err = s.UseRefreshToken(ctx, hash("e0"), at, refresh("x0", at))
	wantErr(t, "e0 after its deletion", err, store.ErrNotFound)
	_, err = s.UseRefreshToken(ctx, hash("e3"), at, refresh("x3", at))
	wantErr(t, "e3, expired, not yet deleted", err, store.ErrRevoked)
	del(at, 2, 1)
	del(at, 2, 0)
	_, err = s.UseRefreshToken(ctx, hash("e3"), at, refresh("x3", at))
	wantErr(t, "e3 after its deletion", err, store.ErrNotFound)

	// e1 (family fe) and e9 are left, and still work: e1 is used, then its
	// reuse revokes the family; e9 is revoked by logout.
	_, err = s.UseRefreshToken(ctx, hash("e1"), at, refresh("e1n", at))
	must(t, "use e1", err)
	_, err = s.UseRefreshToken(ctx, hash("e1"), at, refresh("e1m", at))
	wantErr(t, "reuse e1", err, store.ErrRefreshReused)
	_, err = s.UseRefreshToken(ctx, hash("e1n"), at, refresh("e1o", at))
	wantErr(t, "e1n after its family was revoked", err, store.ErrRevoked)
	must(t, "logout e9", s.RevokeRefreshFamily(ctx, hash("e9")))
	_, err = s.UseRefreshToken(ctx, hash("e9"), at, refresh("e9n", at))
	wantErr(t, "e9 after logout", err, store.ErrRevoked)
	// Far in the future, everything goes.
	del(base.Add(48*time.Hour), 100, 3) // e1, e1n, e9
}

// testRefreshTokenExpiryConcurrent: sweeps running at once (one per
// backend replica) delete every expired token once between them, without
// an error.
func testRefreshTokenExpiryConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rtec")
	a := mustAccount(t, s, tn.ID, "dev-rtec-0000000")
	const tokens = 200
	for i := range tokens {
		r := refresh(fmt.Sprint("ec", i), base.Add(time.Duration(i%7)*time.Second))
		r.FamilyID, r.TenantID, r.AccountID = fmt.Sprint("fec", i%5), tn.ID, a.ID
		must(t, "create", s.CreateRefreshToken(ctx, r))
	}
	var deleted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := s.DeleteExpiredRefreshTokens(ctx, base.Add(2*time.Hour), 16)
				if err != nil {
					t.Errorf("concurrent sweep: %v", err)
					return
				}
				deleted.Add(int64(n))
				if n == 0 { // not n < 16: another sweep may have taken part of this one's batch
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, err := s.DeleteExpiredRefreshTokens(ctx, base.Add(2*time.Hour), 1000); err != nil || n != 0 {
		t.Fatalf("after the concurrent sweeps: %d more deleted, %v", n, err)
	}
	if deleted.Load() != tokens {
		t.Fatalf("concurrent sweeps deleted %d tokens in all, want %d", deleted.Load(), tokens)
	}
}

// testRefreshReuseMemory: a family used many times keeps its newest
// store.RefreshReuseMemory used tokens, whose reuse still revokes it; older
// ones are gone (unknown), so the family's rows stay bounded.
func testRefreshReuseMemory(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rrm")
	a := mustAccount(t, s, tn.ID, "dev-rrm-00000000")
	first := refresh("m0", base)
	first.FamilyID, first.TenantID, first.AccountID = "fm", tn.ID, a.ID
	must(t, "create", s.CreateRefreshToken(ctx, first))
	const uses = 3 * store.RefreshReuseMemory
	for i := range uses {
		at := base.Add(time.Duration(i+1) * time.Second)
		_, err := s.UseRefreshToken(ctx, hash(fmt.Sprint("m", i)), at, refresh(fmt.Sprint("m", i+1), at))
		must(t, fmt.Sprint("use m", i), err)
	}
	// Deleting everything far in the future counts the family's rows: the
	// live token and the remembered used ones.
	defer func() {
		if n, err := s.DeleteExpiredRefreshTokens(ctx, base.Add(48*time.Hour), 1000); err != nil || n != store.RefreshReuseMemory+1 {
			t.Errorf("the family holds %d tokens, %v; want %d (the live one and %d used)", n, err, store.RefreshReuseMemory+1, store.RefreshReuseMemory)
		}
	}()
	at := base.Add(time.Hour / 2)
	// m0 .. m(uses-RefreshReuseMemory-1) are forgotten: unknown, and
	// presenting one leaves the family alone.
	forgotten := uses - store.RefreshReuseMemory - 1
	_, err := s.UseRefreshToken(ctx, hash(fmt.Sprint("m", forgotten)), at, refresh("x", at))
	wantErr(t, "a forgotten used token", err, store.ErrNotFound)
	// The oldest remembered one still trips the wire.
	_, err = s.UseRefreshToken(ctx, hash(fmt.Sprint("m", forgotten+1)), at, refresh("y", at))
	wantErr(t, "the oldest remembered used token", err, store.ErrRefreshReused)
	_, err = s.UseRefreshToken(ctx, hash(fmt.Sprint("m", uses)), at, refresh("z", at))
	wantErr(t, "the live token after the reuse", err, store.ErrRevoked)
}

// testRefreshFamilyTrim: TrimRefreshFamilies leaves each account its keep
// newest families (by their newest token), whole, and deletes the others'
// tokens; accounts within the bound are untouched.
func testRefreshFamilyTrim(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rft")
	many := mustAccount(t, s, tn.ID, "dev-rft-00000000")
	few := mustAccount(t, s, tn.ID, "dev-rft-00000001")
	mk := func(h, family string, acc store.Account, created time.Time) {
		t.Helper()
		r := refresh(h, created)
		r.FamilyID, r.TenantID, r.AccountID = family, tn.ID, acc.ID
		must(t, "create "+h, s.CreateRefreshToken(ctx, r))
	}
	// many: families f0..f5 started a minute apart; f0, the oldest start,
	// was used since, so by its newest token it is the newest family.
	for i := range 6 {
		mk(fmt.Sprint("t", i), fmt.Sprint("f", i), many, base.Add(time.Duration(i)*time.Minute))
	}
	_, err := s.UseRefreshToken(ctx, hash("t0"), base.Add(10*time.Minute), refresh("t0b", base.Add(10*time.Minute)))
	must(t, "use t0", err)
	mk("u0", "g0", few, base)
	mk("u1", "g1", few, base.Add(time.Minute))

	trimmed, deleted, err := s.TrimRefreshFamilies(ctx, 3, 100)
	if err != nil || trimmed != 1 || deleted != 3 {
		t.Fatalf("TrimRefreshFamilies(keep 3) = %d accounts, %d tokens, %v; want 1, 3 (f1, f2, f3)", trimmed, deleted, err)
	}
	at := base.Add(20 * time.Minute)
	for _, h := range []string{"t1", "t2", "t3"} {
		_, err := s.UseRefreshToken(ctx, hash(h), at, refresh(h+"n", at))
		wantErr(t, h+" of a trimmed family", err, store.ErrNotFound)
	}
	for _, h := range []string{"t4", "t5", "t0b", "u0", "u1"} {
		_, err := s.UseRefreshToken(ctx, hash(h), at, refresh(h+"n", at))
		must(t, h+" of a kept family", err)
	}
	// f0's used token is kept with it: its reuse still revokes the family.
	_, err = s.UseRefreshToken(ctx, hash("t0"), at, refresh("t0x", at))
	wantErr(t, "reuse of a kept family's used token", err, store.ErrRefreshReused)
	if trimmed, deleted, err := s.TrimRefreshFamilies(ctx, 3, 100); err != nil || trimmed != 0 || deleted != 0 {
		t.Fatalf("a second trim = %d accounts, %d tokens, %v; want nothing", trimmed, deleted, err)
	}
	// The account limit bounds one call.
	other := mustAccount(t, s, tn.ID, "dev-rft-00000002")
	for i := range 3 {
		mk(fmt.Sprint("o", i), fmt.Sprint("h", i), other, base.Add(time.Duration(i)*time.Minute))
	}
	if trimmed, deleted, err := s.TrimRefreshFamilies(ctx, 1, 1); err != nil || trimmed != 1 || deleted == 0 {
		t.Fatalf("TrimRefreshFamilies(keep 1, 1 account) = %d accounts, %d tokens, %v; want 1 account", trimmed, deleted, err)
	}
}

func testRefreshConcurrentUse(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rtc")
	a := mustAccount(t, s, tn.ID, "dev-rtc-00000000")
	first := refresh("c0", base)
	first.FamilyID, first.TenantID, first.AccountID = "fc", tn.ID, a.ID
	must(t, "create", s.CreateRefreshToken(ctx, first))
	var ok, reused atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.UseRefreshToken(ctx, hash("c0"), base.Add(time.Second), refresh(fmt.Sprint("c1-", i), base))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrRefreshReused), errors.Is(err, store.ErrRevoked): // revoked by an earlier reuse
				reused.Add(1)
			default:
				t.Errorf("use: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || reused.Load() != 3 {
		t.Fatalf("concurrent uses: %d succeeded, %d reuse; want 1 and 3", ok.Load(), reused.Load())
	}
}
