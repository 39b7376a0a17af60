package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Upgrades: rows written by an earlier schema, then checked through the
// store after the upgrade. Both stores take the same SQL here.

// Exec runs one statement of a seed on a database an upgrade test brings
// to an earlier schema version (placeholders $1, $2 ..., which both stores
// take).
type Exec func(query string, args ...any) error

// SeedAccountsBeforePartialIndexes writes, through exec, the rows a store's
// test stores at the schema version before the email and custom-id indexes
// became partial (SQLite 8, PostgreSQL 7): two guests, an email account and
// a custom-id account of tenant t_1.
func SeedAccountsBeforePartialIndexes(exec Exec) error {
	for _, q := range accountsBeforePartialIndexes {
		if err := exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

var accountsBeforePartialIndexes = []string{
	`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_1', 'demo', 'Demo', 0)`,
	`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest1', 't_1', 'dev-1', 'g1', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest2', 't_1', 'dev-2', 'g2', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, email, password_hash, display_name, created_at, updated_at) VALUES ('a_mail', 't_1', 'a@example.com', 'h', 'm', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, custom_id, display_name, created_at, updated_at) VALUES ('a_custom', 't_1', 'c-1', 'c', 0, 0)`,
}

// CheckAccountsAfterPartialIndexes checks the accounts of
// SeedAccountsBeforePartialIndexes after the upgrade: found by email and by
// custom id, a second account with either refused (ErrAlreadyExists), a
// third account with neither accepted.
func CheckAccountsAfterPartialIndexes(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	if a, err := s.AccountByEmail(ctx, "t_1", "a@example.com"); err != nil || a.ID != "a_mail" {
		t.Fatalf("AccountByEmail after the upgrade: %+v, %v", a, err)
	}
	if a, err := s.AccountByCustomID(ctx, "t_1", "c-1"); err != nil || a.ID != "a_custom" {
		t.Fatalf("AccountByCustomID after the upgrade: %+v, %v", a, err)
	}
	dupMail := store.Account{ID: "a_dup1", TenantID: "t_1", Email: "a@example.com", PasswordHash: "h", DisplayName: "d", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateAccount(ctx, dupMail); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the email: %v, want ErrAlreadyExists", err)
	}
	dupCustom := store.Account{ID: "a_dup2", TenantID: "t_1", CustomID: "c-1", DisplayName: "d", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateAccount(ctx, dupCustom); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the custom id: %v, want ErrAlreadyExists", err)
	}
	guest := store.Account{ID: "a_guest3", TenantID: "t_1", DeviceID: "dev-3", DisplayName: "g3", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateAccount(ctx, guest); err != nil {
		t.Errorf("a third account with neither: %v", err)
	}
}

// SeedRefreshTokensBeforeExpiryIndex writes, through exec, the rows a
// store's test stores at the schema version before expired refresh tokens were deleted (SQLite 9,
// PostgreSQL 8): tenant t_r, account a_r, and three tokens: "old-used"
// (used, family f_a, expires at base+1h), "old-next" (f_a, base+2h) and
// "other" (f_b, base+3h).
func SeedRefreshTokensBeforeExpiryIndex(exec Exec) error {
	if err := exec(`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_r', 'rtu', 'Refresh upgrade', 0)`); err != nil {
		return err
	}
	if err := exec(`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_r', 't_r', 'dev-r', 'r', 0, 0)`); err != nil {
		return err
	}
	for _, r := range []struct {
		hash, family string
		expires      time.Duration
		used         bool
	}{{"old-used", "f_a", time.Hour, true}, {"old-next", "f_a", 2 * time.Hour, false}, {"other", "f_b", 3 * time.Hour, false}} {
		var used any
		if r.used {
			used = base.UnixMicro()
		}
		if err := exec(`INSERT INTO refresh_tokens (hash, family_id, tenant_id, account_id, created_at, expires_at, used_at, revoked)
			VALUES ($1, $2, 't_r', 'a_r', $3, $4, $5, 0)`, hash(r.hash), r.family, base.UnixMicro(), base.Add(r.expires).UnixMicro(), used); err != nil {
			return err
		}
	}
	return nil
}

// CheckRefreshTokensAfterExpiryIndex checks the tokens of
// SeedRefreshTokensBeforeExpiryIndex after the upgrade: the expired one is
// deleted, reuse of a used one still revokes its family, logout still
// revokes a family, and everything goes once expired.
func CheckRefreshTokensAfterExpiryIndex(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := base.Add(90 * time.Minute)
	if n, err := s.DeleteExpiredRefreshTokens(ctx, at, 10); err != nil || n != 1 {
		t.Fatalf("DeleteExpiredRefreshTokens at base+90m = %d, %v; want 1 (old-used)", n, err)
	}
	next := store.RefreshToken{Hash: hash("new-next"), CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	if old, err := s.UseRefreshToken(ctx, hash("old-next"), at, next); err != nil || old.FamilyID != "f_a" || old.AccountID != "a_r" {
		t.Fatalf("use old-next: %+v, %v", old, err)
	}
	_, err := s.UseRefreshToken(ctx, hash("old-next"), at, store.RefreshToken{Hash: hash("x"), CreatedAt: at, ExpiresAt: at})
	wantErr(t, "reuse old-next", err, store.ErrRefreshReused)
	_, err = s.UseRefreshToken(ctx, hash("new-next"), at, store.RefreshToken{Hash: hash("y"), CreatedAt: at, ExpiresAt: at})
	wantErr(t, "new-next after its family was revoked", err, store.ErrRevoked)
	must(t, "logout other", s.RevokeRefreshFamily(ctx, hash("other")))
	_, err = s.UseRefreshToken(ctx, hash("other"), at, store.RefreshToken{Hash: hash("z"), CreatedAt: at, ExpiresAt: at})
	wantErr(t, "other after logout", err, store.ErrRevoked)
	if n, err := s.DeleteExpiredRefreshTokens(ctx, base.Add(48*time.Hour), 10); err != nil || n != 3 {
		t.Fatalf("DeleteExpiredRefreshTokens at base+48h = %d, %v; want 3 (old-next, new-next, other)", n, err)
	}
}

// RefreshTokenQueries are the statements the refresh-token indexes of
// SQLite schema 10 and PostgreSQL 9 serve, with the index each must use.
var RefreshTokenQueries = []struct{ Query, Index string }{
	{`UPDATE refresh_tokens SET revoked = 1 WHERE account_id = $1 AND family_id = $2`, "refresh_tokens_account_family"},
	{`SELECT hash FROM refresh_tokens WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2`, "refresh_tokens_expiry"},
	{`SELECT hash FROM refresh_tokens WHERE account_id = $1`, "refresh_tokens_account_family"},
}

// UnreportedMatchQuery is the statement the partial index
// matches_unreported (SQLite schema 11, PostgreSQL 10) serves: the sweep's
// choice of matches to delete.
const UnreportedMatchQuery = `SELECT tenant_id, id FROM matches WHERE last_seq = 0 AND ended_at IS NULL AND expires_at <= $1
	ORDER BY expires_at LIMIT $2`

// SeedRostersBeforeAccountIndex writes, through exec, the rows a store's
// test stores at the schema version before match_roster got its index by
// account (SQLite 12, PostgreSQL 11): tenant t_ro with accounts a_ro1 and
// a_ro2 and matches m1 and m2, a_ro1 on both rosters (m1 at base, m2 a
// second later) and a_ro2 on m1's; tenant t_ro2 with its own m1 and
// account a_rox on its roster.
func SeedRostersBeforeAccountIndex(exec Exec) error {
	at := base.UnixMicro()
	stmts := []struct {
		query string
		args  []any
	}{
		{`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_ro', 'rou', 'Roster upgrade', 0), ('t_ro2', 'rou2', 'Roster upgrade 2', 0)`, nil},
		{`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES
			('a_ro1', 't_ro', 'dev-ro1', 'r1', 0, 0), ('a_ro2', 't_ro', 'dev-ro2', 'r2', 0, 0), ('a_rox', 't_ro2', 'dev-rox', 'rx', 0, 0)`, nil},
		{`INSERT INTO matches (tenant_id, id, game, credential_hash, created_at, expires_at, last_seq) VALUES
			('t_ro', 'm1', 'arena', $1, $4, $5, 0), ('t_ro', 'm2', 'arena', $2, $4, $5, 0), ('t_ro2', 'm1', 'arena', $3, $4, $5, 0)`,
			[]any{hash("ro-m1"), hash("ro-m2"), hash("ro2-m1"), at, base.Add(time.Hour).UnixMicro()}},
		{`INSERT INTO match_roster (tenant_id, match_id, account_id, added_at) VALUES
			('t_ro', 'm1', 'a_ro1', $1), ('t_ro', 'm2', 'a_ro1', $2), ('t_ro', 'm1', 'a_ro2', $1), ('t_ro2', 'm1', 'a_rox', $1)`,
			[]any{at, base.Add(time.Second).UnixMicro()}},
	}
	for _, st := range stmts {
		if err := exec(st.query, st.args...); err != nil {
			return fmt.Errorf("%s: %w", st.query, err)
		}
	}
	return nil
}

// CheckRostersAfterAccountIndex checks the rosters of
// SeedRostersBeforeAccountIndex after the upgrade: an account's entries
// are read, newest first, of its tenant only, and a roster entry added
// after the upgrade is read with them.
func CheckRostersAfterAccountIndex(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	read := func(tenantID, accountID string) []string {
		t.Helper()
		var got []string
		must(t, "EachAccountRosterEntry", s.EachAccountRosterEntry(ctx, tenantID, accountID, func(e store.RosterEntry) error {
			got = append(got, e.MatchID+"@"+e.AddedAt.Sub(base).String())
			return nil
		}))
		return got
	}
	if got := read("t_ro", "a_ro1"); !slices.Equal(got, []string{"m2@1s", "m1@0s"}) {
		t.Fatalf("a_ro1's rosters after the upgrade = %v, want m2@1s m1@0s", got)
	}
	if got := read("t_ro2", "a_ro1"); got != nil {
		t.Fatalf("another tenant reads a_ro1's rosters: %v", got)
	}
	must(t, "AddMatchPlayers after the upgrade", s.AddMatchPlayers(ctx, "t_ro", "m2", []string{"a_ro2"}, base.Add(time.Minute)))
	if got := read("t_ro", "a_ro2"); !slices.Equal(got, []string{"m2@1m0s", "m1@0s"}) {
		t.Fatalf("a_ro2's rosters after the upgrade = %v, want m2@1m0s m1@0s", got)
	}
}
