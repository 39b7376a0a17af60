package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store/storetest"
)

// TestPartialAccountIndexesUpgrade upgrades a database of schema version 8
// with accounts in it: the email and custom-id indexes become partial (only
// the accounts that have one), keep refusing duplicates, and still serve
// the lookups by email and custom id.
func TestPartialAccountIndexesUpgrade(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ludus.db")
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, w, 8); err != nil {
		t.Fatal(err)
	}
	for _, q := range storetest.AccountsBeforePartialIndexes {
		if _, err := w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	w.Close()

	s := open(t, path)
	defer s.Close()
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
		var plan strings.Builder
		rows, err := s.r.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT id FROM accounts WHERE tenant_id = ? AND `+q.col+` = ?`, "t_1", "x")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(detail + "; ")
		}
		rows.Close()
		if !strings.Contains(plan.String(), q.idx) {
			t.Errorf("lookup by %s does not use %s: %s", q.col, q.idx, plan.String())
		}
	}

	storetest.CheckAccountsAfterPartialIndexes(t, s)
}
