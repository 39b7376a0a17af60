// Package pgtest gives tests a PostgreSQL store in a fresh schema of the
// server named by LUDUS_TEST_POSTGRES.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver

	"ludus.dev/ludus/backend/store/postgres/pgdsn"
)

// DSN returns LUDUS_TEST_POSTGRES. Without it the test skips, except under
// CI (CI set), where it fails: CI must run the PostgreSQL tests.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("LUDUS_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("LUDUS_TEST_POSTGRES is not set under CI: scripts/test.sh starts a PostgreSQL for these tests")
		}
		t.Skip("LUDUS_TEST_POSTGRES not set (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	return dsn
}

// FreshSchema creates a schema with a random name and returns DSN() with its
// search_path set to it; the schema is dropped at cleanup.
func FreshSchema(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
	})
	return WithSearchPath(dsn, schema)
}

// WithSearchPath returns dsn selecting schema (pgdsn.WithSearchPath).
func WithSearchPath(dsn, schema string) string { return pgdsn.WithSearchPath(dsn, schema) }
