package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for deleting accounts and for hostile strings in every field.

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
