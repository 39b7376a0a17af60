package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
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
	for _, q := range []string{
		`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_1', 'demo', 'Demo', 0)`,
		`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest1', 't_1', 'dev-1', 'g1', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest2', 't_1', 'dev-2', 'g2', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, email, password_hash, display_name, created_at, updated_at) VALUES ('a_mail', 't_1', 'a@example.com', 'h', 'm', 0, 0)`,
		`INSERT INTO accounts (id, tenant_id, custom_id, display_name, created_at, updated_at) VALUES ('a_custom', 't_1', 'c-1', 'c', 0, 0)`,
	} {
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

	if a, err := s.AccountByEmail(ctx, "t_1", "a@example.com"); err != nil || a.ID != "a_mail" {
		t.Fatalf("AccountByEmail after the upgrade: %+v, %v", a, err)
	}
	if a, err := s.AccountByCustomID(ctx, "t_1", "c-1"); err != nil || a.ID != "a_custom" {
		t.Fatalf("AccountByCustomID after the upgrade: %+v, %v", a, err)
	}
	now := time.Unix(10, 0).UTC()
	dupMail := store.Account{ID: "a_dup1", TenantID: "t_1", Email: "a@example.com", PasswordHash: "h", DisplayName: "d", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateAccount(ctx, dupMail); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the email: %v, want ErrAlreadyExists", err)
	}
	dupCustom := store.Account{ID: "a_dup2", TenantID: "t_1", CustomID: "c-1", DisplayName: "d", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateAccount(ctx, dupCustom); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a second account with the custom id: %v, want ErrAlreadyExists", err)
	}
	guest := store.Account{ID: "a_guest3", TenantID: "t_1", DeviceID: "dev-3", DisplayName: "g3", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateAccount(ctx, guest); err != nil {
		t.Errorf("a third account with neither: %v", err)
	}
}
