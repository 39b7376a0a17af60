package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres/pgtest"
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
	for _, q := range []string{
		`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_1', 'demo', 'Demo', 0)`,
		`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest1', 't_1', 'dev-1', 'g1', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest2', 't_1', 'dev-2', 'g2', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, email, password_hash, display_name, created_at, updated_at) VALUES ('a_mail', 't_1', 'a@example.com', 'h', 'm', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, custom_id, display_name, created_at, updated_at) VALUES ('a_custom', 't_1', 'c-1', 'c', 0, 0)`,
	} {
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

	if a, err := s.AccountByEmail(ctx, "t_1", "a@example.com"); err != nil || a.ID != "a_mail" {
		t.Fatalf("AccountByEmail after the upgrade: %+v, %v", a, err)
	}
	if a, err := s.AccountByCustomID(ctx, "t_1", "c-1"); err != nil || a.ID != "a_custom" {
		t.Fatalf("AccountByCustomID after the upgrade: %+v, %v", a, err)
	}
	dupMail := store.Account{ID: "a_dup1", TenantID: "t_1", Email: "a@example.com", PasswordHash: "h", DisplayName: "d", CreatedAt: t0, UpdatedAt: t0}
	if err := s.CreateAccount(ctx, dupMail); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the email: %v, want ErrAlreadyExists", err)
	}
	dupCustom := store.Account{ID: "a_dup2", TenantID: "t_1", CustomID: "c-1", DisplayName: "d", CreatedAt: t0, UpdatedAt: t0}
	if err := s.CreateAccount(ctx, dupCustom); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the custom id: %v, want ErrAlreadyExists", err)
	}
	guest := store.Account{ID: "a_guest3", TenantID: "t_1", DeviceID: "dev-3", DisplayName: "g3", CreatedAt: t0, UpdatedAt: t0}
	if err := s.CreateAccount(ctx, guest); err != nil {
		t.Errorf("a third account with neither: %v", err)
	}
}
