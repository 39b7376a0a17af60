package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

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

func testProgression(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "prog"), mustTenant(t, s, "prog2")
	a := mustAccount(t, s, tn.ID, "dev-prog-0000000")
	c := store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "grant-1", XP: 150,
		Currency: map[string]int64{"gold": 100, "gems": 5}, Items: map[string]int64{"sword": 1}, Reason: "welcome", At: base}
	applied, err := s.ApplyChange(ctx, c)
	must(t, "apply", err)
	if !applied {
		t.Fatal("first change not applied")
	}
	applied, err = s.ApplyChange(ctx, c)
	must(t, "apply again", err)
	if applied {
		t.Fatal("same key applied twice")
	}
	p, err := s.Progression(ctx, tn.ID, a.ID)
	must(t, "progression", err)
	if p.XP != 150 || p.Currency["gold"] != 100 || p.Currency["gems"] != 5 || p.Items["sword"] != 1 {
		t.Fatalf("progression = %+v", p)
	}
	// Spending more than the balance changes nothing at all.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "spend-1", XP: 10,
		Currency: map[string]int64{"gold": -30, "gems": -6}, At: base})
	wantErr(t, "overspend", err, store.ErrInsufficient)
	applied, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "spend-1",
		Currency: map[string]int64{"gold": -30}, Items: map[string]int64{"sword": -1}, Reason: "shop", At: base.Add(time.Second)})
	must(t, "spend (key free again after the failed attempt)", err)
	if !applied {
		t.Fatal("spend not applied")
	}
	p, _ = s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 150 || p.Currency["gold"] != 70 || p.Currency["gems"] != 5 || p.Items["sword"] != 0 {
		t.Fatalf("after spend = %+v", p)
	}
	l, err := s.Ledger(ctx, tn.ID, a.ID, 10)
	must(t, "ledger", err)
	if len(l) != 3 || l[0].Currency != "gold" || l[0].Delta != -30 || l[0].Balance != 70 || l[0].Reason != "shop" || l[0].Key != "spend-1" {
		t.Fatalf("ledger = %+v", l)
	}
	// Another tenant's id: not found, nothing read.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: other.ID, AccountID: a.ID, Key: "x", XP: 1, At: base})
	wantErr(t, "change in other tenant", err, store.ErrNotFound)
	if p, _ := s.Progression(ctx, other.ID, a.ID); p.XP != 0 || len(p.Currency) != 0 {
		t.Fatalf("other tenant reads progression %+v", p)
	}
	if l, _ := s.Ledger(ctx, other.ID, a.ID, 10); len(l) != 0 {
		t.Fatalf("other tenant reads ledger %+v", l)
	}
}

func testProgressionConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "progc")
	a := mustAccount(t, s, tn.ID, "dev-progc-000000")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Keys 0..9, each sent twice.
			_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: fmt.Sprint("k", i%10), XP: 1,
				Currency: map[string]int64{"gold": 10}, At: base})
			if err != nil {
				t.Errorf("apply: %v", err)
			}
		}()
	}
	wg.Wait()
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 10 || p.Currency["gold"] != 100 {
		t.Fatalf("progression after concurrent duplicates = %+v, want xp 10 gold 100", p)
	}
}

func mustMatch(t *testing.T, s store.Store, tenantID, matchID, game string) {
	t.Helper()
	must(t, "CreateMatch", s.CreateMatch(context.Background(), store.Match{TenantID: tenantID, ID: matchID, Game: game,
		CredentialHash: hash("cred-" + tenantID + matchID), CreatedAt: base, ExpiresAt: base.Add(time.Hour)}))
}

func testMatchReports(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "mr"), mustTenant(t, s, "mr2")
	a := mustAccount(t, s, tn.ID, "dev-mr-a00000000")
	b := mustAccount(t, s, tn.ID, "dev-mr-b00000000")
	stranger := mustAccount(t, s, other.ID, "dev-mr-x00000000")
	mustMatch(t, s, tn.ID, "m1", "arena")
	m, err := s.MatchByCredential(ctx, hash("cred-"+tn.ID+"m1"))
	must(t, "by credential", err)
	if m.ID != "m1" || m.TenantID != tn.ID || m.Game != "arena" || !m.EndedAt.IsZero() {
		t.Fatalf("match = %+v", m)
	}
	wantErr(t, "duplicate match", s.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: "m1", Game: "x", CredentialHash: hash("other"), CreatedAt: base, ExpiresAt: base}), store.ErrAlreadyExists)

	report := func(seq int64, final bool, xpA, goldA, xpB int64) store.MatchReport {
		return store.MatchReport{TenantID: tn.ID, MatchID: "m1", Seq: seq, Final: final, At: base.Add(time.Duration(seq) * time.Second),
			Players: []store.PlayerReport{
				{AccountID: a.ID, Score: xpA, XP: xpA, Currency: map[string]int64{"gold": goldA}, ItemsUsed: map[string]int64{"potion": 1}},
				{AccountID: b.ID, Score: xpB, XP: xpB},
				{AccountID: stranger.ID, Score: 999, XP: 999}, // another tenant's account: ignored
			}}
	}
	apply := func(r store.MatchReport, want bool) {
		t.Helper()
		got, err := s.ApplyMatchReport(ctx, r)
		must(t, fmt.Sprintf("report seq %d final %v", r.Seq, r.Final), err)
		if got != want {
			t.Fatalf("report seq %d final %v: applied = %v, want %v", r.Seq, r.Final, got, want)
		}
	}
	// Interim reports out of order and replayed: cumulative totals apply once.
	apply(report(2, false, 20, 4, 10), true)
	apply(report(1, false, 10, 2, 5), false) // stale
	apply(report(2, false, 20, 4, 10), false)
	apply(report(3, false, 30, 6, 10), true)
	pa, _ := s.Progression(ctx, tn.ID, a.ID)
	pb, _ := s.Progression(ctx, tn.ID, b.ID)
	if pa.XP != 30 || pa.Currency["gold"] != 6 || pb.XP != 10 {
		t.Fatalf("after interim: a=%+v b=%+v", pa, pb)
	}
	// The final report, delivered twice.
	final := report(4, true, 50, 9, 12)
	final.Webhook = &store.WebhookDelivery{ID: "d_m1", TenantID: tn.ID, Event: "match.result", Payload: []byte(`{}`), NextAt: base, CreatedAt: base, UpdatedAt: base}
	apply(final, true)
	apply(final, false)
	_, err = s.ApplyMatchReport(ctx, report(5, false, 60, 9, 12))
	wantErr(t, "interim after final", err, store.ErrMatchEnded)
	pa, _ = s.Progression(ctx, tn.ID, a.ID)
	pb, _ = s.Progression(ctx, tn.ID, b.ID)
	if pa.XP != 50 || pa.Currency["gold"] != 9 || pb.XP != 12 {
		t.Fatalf("after final: a=%+v b=%+v", pa, pb)
	}
	if ps, _ := s.Progression(ctx, other.ID, stranger.ID); ps.XP != 0 {
		t.Fatalf("another tenant's account was granted %+v", ps)
	}
	res, err := s.MatchResult(ctx, tn.ID, "m1")
	must(t, "match result", err)
	if res.Game != "arena" || len(res.Players) != 2 || res.Players[0].AccountID != a.ID || res.Players[0].Score != 50 || res.Players[0].ItemsUsed["potion"] != 1 {
		t.Fatalf("result = %+v", res)
	}
	_, err = s.MatchResult(ctx, other.ID, "m1")
	wantErr(t, "result from other tenant", err, store.ErrNotFound)
	rs, err := s.ListMatchResults(ctx, tn.ID, b.ID, 10)
	must(t, "list results", err)
	if len(rs) != 1 || rs[0].MatchID != "m1" {
		t.Fatalf("results of b = %+v", rs)
	}
	if rs, _ := s.ListMatchResults(ctx, other.ID, "", 10); len(rs) != 0 {
		t.Fatalf("other tenant lists %+v", rs)
	}
	ds, err := s.ListDeliveries(ctx, tn.ID, 10)
	must(t, "deliveries", err)
	if len(ds) != 1 || ds[0].ID != "d_m1" || ds[0].State != store.DeliveryPending {
		t.Fatalf("deliveries = %+v", ds)
	}
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: other.ID, MatchID: "m1", Seq: 9, At: base})
	wantErr(t, "report to other tenant's match", err, store.ErrNotFound)
}

func testMatchReportsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "mrc")
	a := mustAccount(t, s, tn.ID, "dev-mrc-a0000000")
	mustMatch(t, s, tn.ID, "m", "arena")
	var wg sync.WaitGroup
	var applied atomic.Int32
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int64(i%4 + 1)
			r := store.MatchReport{TenantID: tn.ID, MatchID: "m", Seq: seq, Final: i%4 == 3, At: base,
				Players: []store.PlayerReport{{AccountID: a.ID, Score: 7, XP: seq * 10, Currency: map[string]int64{"gold": seq}}}}
			if i%4 == 3 {
				r.Players[0].XP, r.Players[0].Currency["gold"] = 100, 10
			}
			ok, err := s.ApplyMatchReport(ctx, r)
			if err != nil && !errors.Is(err, store.ErrMatchEnded) {
				t.Errorf("report: %v", err)
			}
			if ok && r.Final {
				applied.Add(1)
			}
		}()
	}
	wg.Wait()
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 100 || p.Currency["gold"] != 10 || applied.Load() != 1 {
		t.Fatalf("after concurrent reports: %+v, finals applied %d; want xp 100, gold 10, 1 final", p, applied.Load())
	}
	e, err := s.LeaderboardRank(ctx, tn.ID, "arena", true, a.ID)
	must(t, "rank", err)
	if e.Matches != 1 || e.Sum != 7 {
		t.Fatalf("leaderboard entry = %+v (a final applied more than once?)", e)
	}
}

func testLeaderboard(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "lb")
	var accs []store.Account
	for i := range 5 {
		accs = append(accs, mustAccount(t, s, tn.ID, fmt.Sprintf("dev-lb-%010d", i)))
	}
	// Two matches: best and sum differ in order.
	scores := [][]int64{{10, 50, 30, 0, 20}, {45, 0, 30, 5, 20}}
	for mi, sc := range scores {
		mid := fmt.Sprint("lbm", mi)
		mustMatch(t, s, tn.ID, mid, "arena")
		r := store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base}
		for i, a := range accs {
			r.Players = append(r.Players, store.PlayerReport{AccountID: a.ID, Score: sc[i]})
		}
		_, err := s.ApplyMatchReport(ctx, r)
		must(t, "final", err)
	}
	// best: a1 50, a0 45, a2 30, a4 20, a3 5; sum: a2 60, a0 55, a1 50, a4 40, a3 5
	top, err := s.Leaderboard(ctx, tn.ID, "arena", true, 0, 3)
	must(t, "top best", err)
	if len(top) != 3 || top[0].AccountID != accs[1].ID || top[0].Best != 50 || top[1].AccountID != accs[0].ID || top[2].Rank != 3 {
		t.Fatalf("top by best = %+v", top)
	}
	top, err = s.Leaderboard(ctx, tn.ID, "arena", false, 0, 5)
	must(t, "top sum", err)
	if len(top) != 5 || top[0].AccountID != accs[2].ID || top[0].Sum != 60 || top[0].Matches != 2 || top[4].AccountID != accs[3].ID {
		t.Fatalf("top by sum = %+v", top)
	}
	e, err := s.LeaderboardRank(ctx, tn.ID, "arena", false, accs[4].ID)
	must(t, "rank", err)
	if e.Rank != 4 || e.Sum != 40 {
		t.Fatalf("rank of a4 by sum = %+v", e)
	}
	page, _ := s.Leaderboard(ctx, tn.ID, "arena", false, int(e.Rank)-2, 3)
	if len(page) != 3 || page[1].AccountID != accs[4].ID || page[1].Rank != 4 {
		t.Fatalf("around a4 = %+v", page)
	}
	_, err = s.LeaderboardRank(ctx, tn.ID, "other-game", true, accs[0].ID)
	wantErr(t, "rank in another game", err, store.ErrNotFound)
}

func testWebhooks(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "wh"), mustTenant(t, s, "wh2")
	_, err := s.Webhook(ctx, tn.ID)
	wantErr(t, "no webhook", err, store.ErrNotFound)
	must(t, "put", s.PutWebhook(ctx, store.Webhook{TenantID: tn.ID, URL: "https://example.com/h?a='1'", Secret: []byte("s3cret")}))
	w, err := s.Webhook(ctx, tn.ID)
	must(t, "get", err)
	if w.URL != "https://example.com/h?a='1'" || string(w.Secret) != "s3cret" {
		t.Fatalf("webhook = %+v", w)
	}
	_, err = s.Webhook(ctx, other.ID)
	wantErr(t, "other tenant's webhook", err, store.ErrNotFound)

	a := mustAccount(t, s, tn.ID, "dev-wh-000000000")
	for i := range 3 {
		mid := fmt.Sprint("whm", i)
		mustMatch(t, s, tn.ID, mid, "arena")
		_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}},
			Webhook: &store.WebhookDelivery{ID: "d" + mid, TenantID: tn.ID, Event: "match.result", Payload: []byte(mid),
				NextAt: base.Add(time.Duration(i) * time.Second), CreatedAt: base.Add(time.Duration(i) * time.Second), UpdatedAt: base}})
		must(t, "final", err)
	}
	due, err := s.DueDeliveries(ctx, base.Add(time.Second), base.Add(time.Minute), 10)
	must(t, "due", err)
	if len(due) != 2 || due[0].ID != "dwhm0" || string(due[0].Payload) != "whm0" {
		t.Fatalf("due = %+v", due)
	}
	// Leased: not due again until the lease ends.
	if again, _ := s.DueDeliveries(ctx, base.Add(2*time.Second), base.Add(time.Minute), 10); len(again) != 1 || again[0].ID != "dwhm2" {
		t.Fatalf("due during lease = %+v", again)
	}
	d := due[0]
	d.State, d.Attempts, d.UpdatedAt = store.DeliveryDelivered, 1, base.Add(3*time.Second)
	must(t, "update", s.UpdateDelivery(ctx, d))
	d = due[1]
	d.Attempts, d.LastError, d.NextAt = 1, "HTTP 500", base.Add(5*time.Second)
	must(t, "update", s.UpdateDelivery(ctx, d))
	after, _ := s.DueDeliveries(ctx, base.Add(2*time.Hour), base.Add(3*time.Hour), 10)
	if len(after) != 2 {
		t.Fatalf("due after lease = %+v", after)
	}
	ds, _ := s.ListDeliveries(ctx, tn.ID, 10)
	if len(ds) != 3 || ds[2].State != store.DeliveryDelivered || ds[1].LastError != "HTTP 500" {
		t.Fatalf("deliveries = %+v", ds)
	}
	if ds, _ := s.ListDeliveries(ctx, other.ID, 10); len(ds) != 0 {
		t.Fatalf("other tenant sees deliveries %+v", ds)
	}
	must(t, "remove webhook", s.PutWebhook(ctx, store.Webhook{TenantID: tn.ID}))
	_, err = s.Webhook(ctx, tn.ID)
	wantErr(t, "removed webhook", err, store.ErrNotFound)
}

func testDeleteAccountCascades(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "del")
	a := mustAccount(t, s, tn.ID, "dev-del-a0000000")
	b := mustAccount(t, s, tn.ID, "dev-del-b0000000")
	_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "g", XP: 5, Currency: map[string]int64{"gold": 1}, Items: map[string]int64{"x": 1}, At: base})
	must(t, "grant", err)
	r := store.RefreshToken{Hash: hash("del-rt"), FamilyID: "fd", TenantID: tn.ID, AccountID: a.ID, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	must(t, "refresh", s.CreateRefreshToken(ctx, r))
	mustMatch(t, s, tn.ID, "dm", "arena")
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "dm", Final: true, At: base,
		Players: []store.PlayerReport{{AccountID: a.ID, Score: 3}, {AccountID: b.ID, Score: 2}}})
	must(t, "final", err)
	must(t, "delete", s.DeleteAccount(ctx, tn.ID, a.ID))
	if p, _ := s.Progression(ctx, tn.ID, a.ID); p.XP != 0 || len(p.Currency) != 0 || len(p.Items) != 0 {
		t.Fatalf("progression survives deletion: %+v", p)
	}
	if l, _ := s.Ledger(ctx, tn.ID, a.ID, 10); len(l) != 0 {
		t.Fatalf("ledger survives deletion: %+v", l)
	}
	_, err = s.UseRefreshToken(ctx, hash("del-rt"), base, refresh("n", base))
	wantErr(t, "refresh of deleted account", err, store.ErrNotFound)
	_, err = s.LeaderboardRank(ctx, tn.ID, "arena", true, a.ID)
	wantErr(t, "leaderboard of deleted account", err, store.ErrNotFound)
	res, err := s.MatchResult(ctx, tn.ID, "dm")
	must(t, "result", err)
	if len(res.Players) != 1 || res.Players[0].AccountID != b.ID {
		t.Fatalf("result after deletion = %+v", res)
	}
	// A fresh account can be created with the deleted one's device.
	mustAccount(t, s, tn.ID, "dev-del-a0000000")
}

// testNastyStringsEverywhere puts SQL metacharacters and a long string in
// every string column the new methods take: they come back verbatim.
func testNastyStringsEverywhere(t *testing.T, s store.Store) {
	ctx := context.Background()
	long := strings.Repeat("x'\"", 300) // 900 bytes: more than any field the backend accepts
	for i, str := range append(nasty, long) {
		tn := mustTenant(t, s, fmt.Sprint("n", i))
		a := store.Account{ID: id("a_"), TenantID: tn.ID, Email: str, CustomID: str, PasswordHash: str, DisplayName: str, CreatedAt: base, UpdatedAt: base}
		must(t, "account", s.CreateAccount(ctx, a))
		if g, err := s.AccountByEmail(ctx, tn.ID, str); err != nil || g.Email != str || g.PasswordHash != str {
			t.Fatalf("email round trip %q: %+v %v", str, g, err)
		}
		if g, err := s.AccountByCustomID(ctx, tn.ID, str); err != nil || g.CustomID != str {
			t.Fatalf("custom round trip %q: %+v %v", str, g, err)
		}
		must(t, "key", s.CreateAPIKey(ctx, store.APIKey{ID: id("k_"), TenantID: tn.ID, Hash: hash(str + tn.ID), Scope: str, Name: str, CreatedAt: base}))
		if ks, _ := s.ListAPIKeys(ctx, tn.ID); len(ks) != 1 || ks[0].Name != str || ks[0].Scope != str {
			t.Fatalf("key round trip %q: %+v", str, ks)
		}
		must(t, "throttle", s.PutLoginThrottle(ctx, tn.ID, str, store.LoginThrottle{Failures: 1, LastFailure: base}))
		if th, _ := s.LoginThrottle(ctx, tn.ID, str); th.Failures != 1 {
			t.Fatalf("throttle round trip %q: %+v", str, th)
		}
		_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: str, Reason: str,
			Currency: map[string]int64{str: 3}, Items: map[string]int64{str: 2}, At: base})
		must(t, "change", err)
		p, _ := s.Progression(ctx, tn.ID, a.ID)
		l, _ := s.Ledger(ctx, tn.ID, a.ID, 1)
		if p.Currency[str] != 3 || p.Items[str] != 2 || len(l) != 1 || l[0].Key != str || l[0].Reason != str {
			t.Fatalf("progression round trip %q: %+v %+v", str, p, l)
		}
		mid := str
		must(t, "match", s.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: mid, Game: str, CredentialHash: hash("c" + str + tn.ID), CreatedAt: base, ExpiresAt: base}))
		_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 1, ItemsUsed: map[string]int64{str: 1}, Currency: map[string]int64{str: 1}}},
			Webhook: &store.WebhookDelivery{ID: str + tn.ID, TenantID: tn.ID, Event: str, Payload: []byte(str), LastError: str, NextAt: base, CreatedAt: base, UpdatedAt: base}})
		must(t, "report", err)
		res, err := s.MatchResult(ctx, tn.ID, mid)
		must(t, "result", err)
		if res.Game != str || res.Players[0].ItemsUsed[str] != 1 {
			t.Fatalf("result round trip %q: %+v", str, res)
		}
		if lb, _ := s.Leaderboard(ctx, tn.ID, str, true, 0, 1); len(lb) != 1 {
			t.Fatalf("leaderboard of game %q: %+v", str, lb)
		}
		must(t, "webhook", s.PutWebhook(ctx, store.Webhook{TenantID: tn.ID, URL: str, Secret: []byte(str)}))
		if w, _ := s.Webhook(ctx, tn.ID); w.URL != str {
			t.Fatalf("webhook round trip %q: %+v", str, w)
		}
		if ds, _ := s.ListDeliveries(ctx, tn.ID, 1); len(ds) != 1 || ds[0].Event != str || ds[0].LastError != str {
			t.Fatalf("delivery round trip %q: %+v", str, ds)
		}
	}
}
