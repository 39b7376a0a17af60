package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t, filepath.Join(t.TempDir(), "ludus.db"))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub dir?#%", "ludus.db") // characters URIs care about
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	tn := store.Tenant{ID: "t_1", Slug: "demo", Name: "Demo", CreatedAt: time.Unix(1, 0).UTC()}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the given path: %v", err)
	}

	s = open(t, path) // migrations already applied: no-op
	defer s.Close()
	got, err := s.TenantBySlug(ctx, "demo")
	if err != nil || got.ID != "t_1" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	var versions int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != SchemaVersion() {
		t.Errorf("schema_migrations has %d rows, want %d", versions, SchemaVersion())
	}
}

func TestPragmas(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "ludus.db"))
	defer s.Close()
	for _, db := range []*sql.DB{s.w, s.r} {
		var mode string
		var fk, busy int
		if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || fk != 1 || busy < 1000 {
			t.Errorf("journal_mode=%s foreign_keys=%d busy_timeout=%d", mode, fk, busy)
		}
	}
	// The read pool cannot write.
	if _, err := s.r.ExecContext(ctx, `INSERT INTO tenants VALUES ('x','x','x',0)`); err == nil {
		t.Error("read pool accepted a write")
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ludus.db")
	s := open(t, path)
	if _, err := s.w.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

func TestNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(path, []byte(strings.Repeat("not a database ", 100)), 0o644)
	if s, err := Open(context.Background(), path); err == nil {
		s.Close()
		t.Fatal("opened a junk file")
	}
}

func TestModuleBoundAcrossStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ludus.db")
	storetest.ModuleBoundAcrossStores(t, func(t *testing.T) store.Store {
		s := open(t, path)
		t.Cleanup(func() { s.Close() })
		return s
	})
}
