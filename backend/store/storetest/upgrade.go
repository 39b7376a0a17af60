package storetest

import (
	"context"
	"errors"
	"testing"

	"ludus.dev/ludus/backend/store"
)

// Upgrades: rows written by an earlier schema, then checked through the
// store after the upgrade. Both stores take the same SQL here.

// AccountsBeforePartialIndexes are the rows a store's test writes at the
// schema version before the email and custom-id indexes became partial
// (SQLite 8, PostgreSQL 7): two guests, an email account and a custom-id
// account of tenant t_1.
var AccountsBeforePartialIndexes = []string{
	`INSERT INTO tenants (id, slug, name, created_at) VALUES ('t_1', 'demo', 'Demo', 0)`,
	`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest1', 't_1', 'dev-1', 'g1', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, device_id, display_name, created_at, updated_at) VALUES ('a_guest2', 't_1', 'dev-2', 'g2', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, email, password_hash, display_name, created_at, updated_at) VALUES ('a_mail', 't_1', 'a@example.com', 'h', 'm', 0, 0)`,
	`INSERT INTO accounts (id, tenant_id, custom_id, display_name, created_at, updated_at) VALUES ('a_custom', 't_1', 'c-1', 'c', 0, 0)`,
}

// CheckAccountsAfterPartialIndexes checks the accounts of
// AccountsBeforePartialIndexes after the upgrade: found by email and by
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
