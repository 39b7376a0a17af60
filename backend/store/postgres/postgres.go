// Package postgres implements store.Store on PostgreSQL through pgx
// (github.com/jackc/pgx/v5, via its database/sql driver). It shares every
// query with the SQLite store (package sqlstore); this package owns the
// schema and maps PostgreSQL's error codes.
//
// Many backend replicas may share one database. Open migrates the schema in
// one transaction under an advisory lock, so replicas starting together
// migrate once. Transactions run at READ COMMITTED; the queries that must be
// atomic (exactly-once grants, refresh-token rotation, delivery leases) take
// row locks with UPDATE ... WHERE or INSERT ... ON CONFLICT, and a call that
// fails with a serialization failure or deadlock is retried.
//
// Writes are group-committed (sqlstore's Dialect.GroupCommit): a store's
// concurrent write calls share one transaction on one connection and one
// WAL flush, each call isolated from the others' failures. Guest logins
// are batched apart, a batch in one statement (Dialect.BatchSessions), and
// a match report is two statements (Dialect.WritableCTEs); the match
// reports of a group commit send their statements together, with the
// transaction's BEGIN and COMMIT (Dialect.Pipeline: pgx batches).
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlstore"
)

// Store is a store.Store on a PostgreSQL database.
type Store struct {
	*sqlstore.DB
	db *sql.DB
}

var _ store.Store = (*Store)(nil)

// MaxConns bounds the connection pool of a Store.
const MaxConns = 32

// batchTimeout bounds a group commit's batch (sqlstore.Dialect.BatchTimeout).
const batchTimeout = 30 * time.Second

// Open connects to the database named by dsn (a "postgres://" URL or a
// key=value string, as libpq takes), checks it answers, and migrates it.
// A search_path in the DSN selects the schema.
func Open(ctx context.Context, dsn string) (*Store, error) {
	if dsn == "" {
		return nil, errors.New("postgres: empty DSN")
	}
	cfg, err := pgconnParse(dsn)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(MaxConns)
	db.SetMaxIdleConns(MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Store{DB: sqlstore.New(db, db, sqlstore.Dialect{Name: "postgres", Dollar: true, MapError: mapError, Retry: retry,
		GroupCommit: true, BatchTimeout: batchTimeout, BatchSessions: true, WritableCTEs: true,
		Pipeline: pipeline}), db: db}, nil
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return len(migrations) }

// migrationLock is the pg_advisory_xact_lock key of migrations ("ludus" in ASCII).
const migrationLock = 0x6c75647573

func migrate(ctx context.Context, db *sql.DB) error { return migrateTo(ctx, db, len(migrations)) }

// migrateTo brings the schema to version target (tests start from an
// earlier version to check an upgrade with data in it).
func migrateTo(ctx context.Context, db *sql.DB, target int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT  NOT NULL
	)`); err != nil {
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
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, sqlstore.ToDB(time.Now())); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// mapError maps PostgreSQL error codes to the store's sentinel errors.
func mapError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	switch pe.Code {
	case "23505": // unique_violation
		return store.ErrAlreadyExists
	case "23503": // foreign_key_violation
		return store.ErrNotFound
	case "22021", // character_not_in_repertoire (NUL in text)
		"22P05", // untranslatable_character
		"54000", // program_limit_exceeded (index row too large)
		"22001": // string_data_right_truncation
		return store.ErrInvalid
	}
	return nil
}

// retry reports serialization failures, deadlocks and match reports that
// raced another report of their match (sqlstore.ErrReportRaced).
func retry(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, sqlstore.ErrReportRaced) || errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}
