package postgres

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store/postgres/pgtest"
	"ludus.dev/ludus/backend/store/storetest"
)

// TestPartialAccountIndexesUpgrade upgrades a schema of version 7 with
// accounts in it: the email and custom-id indexes become partial (only the
// accounts that have one), keep refusing duplicates, and still serve the
// lookups by email and custom id, in the generic plans PostgreSQL keeps for
// prepared statements too.
func TestPartialAccountIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.FreshSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrateTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	for _, q := range storetest.AccountsBeforePartialIndexes {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, idx := range []string{"accounts_email", "accounts_custom_id"} {
		var def string
		if err := db.QueryRowContext(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1`, idx).Scan(&def); err != nil {
			t.Fatalf("%s: %v", idx, err)
		}
		if !strings.Contains(def, "IS NOT NULL") {
			t.Errorf("%s is not partial: %s", idx, def)
		}
	}
	// One connection: the settings and the prepared statement are its own.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_seqscan = off`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct{ col, idx string }{{"email", "accounts_email"}, {"custom_id", "accounts_custom_id"}} {
		if _, err := conn.ExecContext(ctx, `PREPARE by_`+q.col+`(text, text) AS SELECT id FROM accounts WHERE tenant_id = $1 AND `+q.col+` = $2`); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE by_`+q.col+`('t_1', 'x')`)
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		rows.Close()
		if !strings.Contains(plan.String(), q.idx) {
			t.Errorf("the generic plan of a lookup by %s does not use %s:\n%s", q.col, q.idx, plan.String())
		}
	}

	storetest.CheckAccountsAfterPartialIndexes(t, s)
}
