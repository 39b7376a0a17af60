package postgres

import (
	"context"
	"strings"
	"testing"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres/pgtest"
	"ludus.dev/ludus/backend/store/storetest"
)

func testDSN(t *testing.T) string { return pgtest.DSN(t) }

func openFresh(t *testing.T) *Store {
	t.Helper()
	s, _ := openFreshDSN(t)
	return s
}

// openWithTenant is openFresh with tenant t_g created.
func openWithTenant(t *testing.T) *Store {
	t.Helper()
	s := openFresh(t)
	if err := s.CreateTenant(context.Background(), store.Tenant{ID: "t_g", Slug: "g", Name: "G", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	return s
}

func openFreshDSN(t *testing.T) (*Store, string) {
	t.Helper()
	dsn := pgtest.FreshSchema(t)
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}

func TestStore(t *testing.T) {
	testDSN(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openFresh(t) })
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	ctx := context.Background()
	s, dsn := openFreshDSN(t)
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t_1", Slug: "demo", Name: "Demo"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.TenantBySlug(ctx, "demo"); err != nil || got.ID != "t_1" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	var n int
	if err := s2.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows, %v; want %d", n, err, SchemaVersion())
	}
	if _, err := s2.db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES ($1, 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dsn); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

func TestBadDSN(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, ""); err == nil {
		t.Fatal("empty DSN accepted")
	}
	if _, err := Open(ctx, "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"); err == nil {
		t.Fatal("connected to nothing")
	}
}

func TestModuleBoundAcrossStores(t *testing.T) {
	_, dsn := openFreshDSN(t)
	storetest.ModuleBoundAcrossStores(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
