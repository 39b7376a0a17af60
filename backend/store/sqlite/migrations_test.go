package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store/sqlstore"
	"ludus.dev/ludus/backend/store/storetest"
)

// TestPartialAccountIndexesUpgrade upgrades a database of schema version 8
// with accounts in it: the email and custom-id indexes become partial (only
// the accounts that have one), keep refusing duplicates, and still serve
// the lookups by email and custom id.
func TestPartialAccountIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	s := upgradedFrom(t, 8, storetest.SeedAccountsBeforePartialIndexes)
	for _, idx := range []string{"accounts_email", "accounts_custom_id"} {
		var def string
		if err := s.r.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?`, idx).Scan(&def); err != nil {
			t.Fatalf("%s: %v", idx, err)
		}
		if !strings.Contains(def, "IS NOT NULL") {
			t.Errorf("%s is not partial: %s", idx, def)
		}
	}
	for _, q := range []struct{ col, idx string }{{"email", "accounts_email"}, {"custom_id", "accounts_custom_id"}} {
		if plan := queryPlan(t, s.r, `SELECT id FROM accounts WHERE tenant_id = ? AND `+q.col+` = ?`, "t_1", "x"); !strings.Contains(plan, q.idx) {
			t.Errorf("lookup by %s does not use %s: %s", q.col, q.idx, plan)
		}
	}

	storetest.CheckAccountsAfterPartialIndexes(t, s)
}

// TestRefreshTokenIndexesUpgrade upgrades a database of schema version 9
// with refresh tokens in it: the two one-column indexes give way to one on
// (account_id, family_id) and one on expires_at, which the family
// revocation, the deletion of expired tokens and an account's tokens use,
// and the old tokens work as before.
func TestRefreshTokenIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	s := upgradedFrom(t, 9, storetest.SeedRefreshTokensBeforeExpiryIndex)
	var indexes []string
	rows, err := s.r.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'refresh_tokens' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	rows.Close()
	if got := strings.Join(indexes, " "); got != "refresh_tokens_account_family refresh_tokens_expiry" {
		t.Errorf("refresh_tokens indexes after the upgrade: %s", got)
	}
	for _, q := range storetest.RefreshTokenQueries {
		if plan := queryPlan(t, s.r, q.Query, "a", "b"); !strings.Contains(plan, q.Index) {
			t.Errorf("%s does not use %s: %s", q.Query, q.Index, plan)
		}
	}

	storetest.CheckRefreshTokensAfterExpiryIndex(t, s)
}

// TestUnreportedMatchIndexUpgrade: schema 11 adds the partial index that
// the sweep of unreported matches reads.
func TestUnreportedMatchIndexUpgrade(t *testing.T) {
	s := upgradedFrom(t, 10, func(storetest.Exec) error { return nil })
	if plan := queryPlan(t, s.r, storetest.UnreportedMatchQuery, 0, 10); !strings.Contains(plan, "matches_unreported") {
		t.Errorf("the sweep's query does not use matches_unreported: %s", plan)
	}
}

// queryPlan returns SQLite's plan for query (EXPLAIN QUERY PLAN), its
// steps joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "; ")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// upgradedFrom makes a database of schema version, writes seed into it,
// and opens a Store on it, which migrates it to the newest version; the
// Store closes with the test.
func upgradedFrom(t *testing.T, version int, seed func(storetest.Exec) error) *Store {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ludus.db")
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, w, version); err != nil {
		t.Fatal(err)
	}
	if err := seed(func(q string, args ...any) error {
		_, err := w.ExecContext(ctx, q, args...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := open(t, path)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestAccountMatchResultsPlan: ListMatchResults of one account reads the
// account's rows, not every ended match of the tenant.
func TestAccountMatchResultsPlan(t *testing.T) {
	s := upgradedFrom(t, 10, func(storetest.Exec) error { return nil })
	plan := queryPlan(t, s.r, sqlstore.AccountMatchResultsQuery, "t_1", "a_1", 20)
	if !strings.Contains(plan, "match_players_account") || strings.Contains(plan, "matches_ended") {
		t.Errorf("an account's match results are not read from its rows: %s", plan)
	}
}

// TestRosterAccountIndexUpgrade upgrades a database of schema version 12
// with rosters in it: schema 13 adds match_roster_account, which the
// export's read of an account's rosters uses (not the primary key, by
// match, which would read every roster of the tenant), and finds the
// rosters stored before.
func TestRosterAccountIndexUpgrade(t *testing.T) {
	s := upgradedFrom(t, 12, storetest.SeedRostersBeforeAccountIndex)
	if plan := queryPlan(t, s.r, sqlstore.AccountRosterQuery, "t_1", "a_1"); !strings.Contains(plan, "INDEX match_roster_account (tenant_id=? AND account_id=?)") {
		t.Errorf("an account's rosters are not read by match_roster_account: %s", plan)
	}
	storetest.CheckRostersAfterAccountIndex(t, s)
}
