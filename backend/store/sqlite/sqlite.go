// Package sqlite implements store.Store on SQLite (modernc.org/sqlite, pure Go).
//
// The database runs in WAL mode with synchronous=NORMAL (commits do not wait
// for fsync; see dsn), a busy timeout and foreign keys on. Writes
// go through a pool of one connection, so they are serialized in Go and never
// contend for SQLite's single write lock (every write transaction starts with
// BEGIN IMMEDIATE); reads use a separate query-only pool and run in parallel
// with each other and with the writer, as WAL allows.
//
// The schema is migrated at Open (see migrations.go), in one transaction,
// recording applied versions in schema_migrations.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlstore"
)

// Store is a store.Store backed by one SQLite database file.
type Store struct {
	*sqlstore.DB
	w *sql.DB // writer: one connection
	r *sql.DB // readers
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and migrates it.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return &Store{DB: sqlstore.New(w, r, sqlstore.Dialect{Name: "sqlite", MapError: mapError, GroupCommit: true, CacheStatements: true}), w: w, r: r}, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		// NORMAL: in WAL mode a commit does not fsync; the WAL is synced at
		// checkpoints. The database never corrupts, and a process crash
		// loses nothing, but an OS crash or power loss may roll back the
		// last transactions committed before it (see docs/BACKEND.md).
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return len(migrations) }

func migrate(ctx context.Context, db *sql.DB) error { return migrateTo(ctx, db, len(migrations)) }

// migrateTo brings the schema to version target (tests start from an
// earlier version to check an upgrade with data in it).
func migrateTo(ctx context.Context, db *sql.DB, target int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&cur); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if cur > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this program knows (%d): upgrade ludus", cur, len(migrations))
	}
	for v := cur + 1; v <= target; v++ {
		for i, stmt := range migrations[v-1] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %d, statement %d: %w", v, i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, toDB(time.Now())); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func toDB(t time.Time) int64 { return sqlstore.ToDB(t) }

// mapError maps SQLite errors to the store's sentinel errors.
func mapError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return store.ErrAlreadyExists
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return store.ErrNotFound
		case sqlite3.SQLITE_TOOBIG:
			return store.ErrInvalid
		}
	}
	return nil
}
