package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store/postgres/pgtest"
	"ludus.dev/ludus/backend/store/sqlstore"
	"ludus.dev/ludus/backend/store/storetest"
)

// TestPartialAccountIndexesUpgrade upgrades a schema of version 7 with
// accounts in it: the email and custom-id indexes become partial (only the
// accounts that have one), keep refusing duplicates, and still serve the
// lookups by email and custom id, in the generic plans PostgreSQL keeps for
// prepared statements too.
func TestPartialAccountIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	s, db := upgradedFrom(t, 7, storetest.SeedAccountsBeforePartialIndexes)
	for _, idx := range []string{"accounts_email", "accounts_custom_id"} {
		var def string
		if err := db.QueryRowContext(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1`, idx).Scan(&def); err != nil {
			t.Fatalf("%s: %v", idx, err)
		}
		if !strings.Contains(def, "IS NOT NULL") {
			t.Errorf("%s is not partial: %s", idx, def)
		}
	}
	conn := planConn(t, db)
	for _, q := range []struct{ col, idx string }{{"email", "accounts_email"}, {"custom_id", "accounts_custom_id"}} {
		plan := genericPlan(t, conn, "by_"+q.col, `SELECT id FROM accounts WHERE tenant_id = $1 AND `+q.col+` = $2`, "('t_1', 'x')")
		if !strings.Contains(plan, q.idx) {
			t.Errorf("the generic plan of a lookup by %s does not use %s:\n%s", q.col, q.idx, plan)
		}
	}

	storetest.CheckAccountsAfterPartialIndexes(t, s)
}

// TestRefreshTokenIndexesUpgrade upgrades a schema of version 8 with
// refresh tokens in it: the two one-column indexes give way to one on
// (account_id, family_id) and one on expires_at, which the family
// revocation, the deletion of expired tokens and an account's tokens use
// in generic plans, and the old tokens work as before.
func TestRefreshTokenIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	s, db := upgradedFrom(t, 8, storetest.SeedRefreshTokensBeforeExpiryIndex)
	var got string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'refresh_tokens' AND indexname <> 'refresh_tokens_pkey'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "refresh_tokens_account_family refresh_tokens_expiry" {
		t.Errorf("refresh_tokens indexes after the upgrade: %s", got)
	}
	conn := planConn(t, db)
	for i, q := range storetest.RefreshTokenQueries {
		args := "('a', 'b')"
		switch {
		case strings.Contains(q.Query, "expires_at"):
			args = "(0, 10)"
		case !strings.Contains(q.Query, "$2"):
			args = "('a')"
		}
		if plan := genericPlan(t, conn, fmt.Sprintf("refresh_q%d", i), q.Query, args); !strings.Contains(plan, q.Index) {
			t.Errorf("the generic plan of %s does not use %s:\n%s", q.Query, q.Index, plan)
		}
	}

	storetest.CheckRefreshTokensAfterExpiryIndex(t, s)
}

// TestUnreportedMatchIndexUpgrade: schema 10 adds the partial index that
// the sweep of unreported matches reads, in a generic plan.
func TestUnreportedMatchIndexUpgrade(t *testing.T) {
	_, db := upgradedFrom(t, 9, func(storetest.Exec) error { return nil })
	conn := planConn(t, db)
	if plan := genericPlan(t, conn, "unreported", storetest.UnreportedMatchQuery, "(0, 10)"); !strings.Contains(plan, "matches_unreported") {
		t.Errorf("the generic plan of the sweep's query does not use matches_unreported:\n%s", plan)
	}
}

// TestRosterAccountIndexUpgrade upgrades a schema of version 11 with
// rosters in it: version 12 adds match_roster_account, which the generic
// plan of the export's read of an account's rosters uses (not the primary
// key, by match, which would read every roster of the tenant), and finds
// the rosters stored before.
func TestRosterAccountIndexUpgrade(t *testing.T) {
	s, db := upgradedFrom(t, 11, storetest.SeedRostersBeforeAccountIndex)
	conn := planConn(t, db)
	plan := genericPlan(t, conn, "account_roster", dollars(sqlstore.AccountRosterQuery), "('t_1', 'a_1')")
	if !strings.Contains(plan, "match_roster_account") || strings.Contains(plan, "match_roster_pkey") {
		t.Errorf("the generic plan of an account's rosters does not read match_roster_account:\n%s", plan)
	}
	storetest.CheckRostersAfterAccountIndex(t, s)
}

// dollars numbers the "?" placeholders of a shared query $1, $2, ..., as
// the store does for PostgreSQL.
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// planConn returns a connection of db (closed with the test) that plans a
// prepared statement generically and avoids sequential scans, so that
// EXPLAIN shows whether an index serves it whatever the table's size. One
// connection: the settings and the prepared statements are its own.
func planConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_seqscan = off`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// genericPlan prepares query as name on conn and returns the plan of
// EXECUTE name args (args in parentheses), one line per step: the generic
// plan on a planConn.
func genericPlan(t *testing.T, conn *sql.Conn, name, query, args string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `PREPARE `+name+` AS `+query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE `+name+args)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// upgradedFrom brings a fresh schema to version, writes seed into it, and
// opens a Store on it, which migrates it to the newest version; db is a
// plain connection pool to the same schema. Both close with the test.
func upgradedFrom(t *testing.T, version int, seed func(storetest.Exec) error) (*Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.FreshSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrateTo(ctx, db, version); err != nil {
		t.Fatal(err)
	}
	if err := seed(func(q string, args ...any) error {
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}
