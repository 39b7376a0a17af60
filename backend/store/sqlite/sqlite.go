// Package sqlite implements store.Store on SQLite (modernc.org/sqlite, pure Go).
//
// The database runs in WAL mode with a busy timeout and foreign keys on. Writes
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
)

// Store is a store.Store backed by one SQLite database file.
type Store struct {
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
	return &Store{w: w, r: r}, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return len(migrations) }

func migrate(ctx context.Context, db *sql.DB) error {
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
	for v := cur + 1; v <= len(migrations); v++ {
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

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

func toDB(t time.Time) int64 { return t.UnixMicro() }

func fromDB(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullTime(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toDB(t), Valid: true}
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}

// wrap maps SQLite errors to the store's sentinel errors.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: %s: %w", op, store.ErrNotFound)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("sqlite: %s: %w (%v)", op, store.ErrAlreadyExists, err)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("sqlite: %s: %w: referenced record missing (%v)", op, store.ErrNotFound, err)
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// inTx runs fn in a write transaction.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return wrap(op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return wrap(op, err)
	}
	return wrap(op, tx.Commit())
}

// Tenants

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant, keys ...store.APIKey) error {
	return s.inTx(ctx, "create tenant", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, slug, name, created_at) VALUES (?, ?, ?, ?)`,
			t.ID, t.Slug, t.Name, toDB(t.CreatedAt)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := insertAPIKey(ctx, tx, k); err != nil {
				return err
			}
		}
		return nil
	})
}

const tenantCols = `id, slug, name, created_at`

func scanTenant(row interface{ Scan(...any) error }) (store.Tenant, error) {
	var t store.Tenant
	var created int64
	err := row.Scan(&t.ID, &t.Slug, &t.Name, &created)
	t.CreatedAt = fromDB(created)
	return t, err
}

// TenantByID implements store.Store.
func (s *Store) TenantByID(ctx context.Context, id string) (store.Tenant, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, id))
	return t, wrap("tenant by id", err)
}

// TenantBySlug implements store.Store.
func (s *Store) TenantBySlug(ctx context.Context, slug string) (store.Tenant, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantCols+` FROM tenants WHERE slug = ?`, slug))
	return t, wrap("tenant by slug", err)
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tenantCols+` FROM tenants ORDER BY created_at, slug`)
	if err != nil {
		return nil, wrap("list tenants", err)
	}
	defer rows.Close()
	var out []store.Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, wrap("list tenants", err)
		}
		out = append(out, t)
	}
	return out, wrap("list tenants", rows.Err())
}

// API keys

func insertAPIKey(ctx context.Context, tx *sql.Tx, k store.APIKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant_id, hash, scope, created_at) VALUES (?, ?, ?, ?, ?)`,
		k.ID, k.TenantID, k.Hash, k.Scope, toDB(k.CreatedAt))
	return err
}

// CreateAPIKey implements store.Store.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	return s.inTx(ctx, "create api key", func(tx *sql.Tx) error { return insertAPIKey(ctx, tx, k) })
}

// APIKeyByHash implements store.Store.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, tenant_id, hash, scope, created_at FROM api_keys WHERE hash = ?`, hash).
		Scan(&k.ID, &k.TenantID, &k.Hash, &k.Scope, &created)
	k.CreatedAt = fromDB(created)
	return k, wrap("api key by hash", err)
}

// Accounts

const accountCols = `id, tenant_id, device_id, display_name, created_at, updated_at`

func scanAccount(row interface{ Scan(...any) error }) (store.Account, error) {
	var a store.Account
	var device sql.NullString
	var created, updated int64
	err := row.Scan(&a.ID, &a.TenantID, &device, &a.DisplayName, &created, &updated)
	a.DeviceID = device.String
	a.CreatedAt, a.UpdatedAt = fromDB(created), fromDB(updated)
	return a, err
}

// CreateAccount implements store.Store.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	return s.inTx(ctx, "create account", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO accounts (`+accountCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
			a.ID, a.TenantID, nullString(a.DeviceID), a.DisplayName, toDB(a.CreatedAt), toDB(a.UpdatedAt))
		return err
	})
}

// AccountByID implements store.Store.
func (s *Store) AccountByID(ctx context.Context, tenantID, accountID string) (store.Account, error) {
	a, err := scanAccount(s.r.QueryRowContext(ctx, `SELECT `+accountCols+` FROM accounts WHERE tenant_id = ? AND id = ?`, tenantID, accountID))
	return a, wrap("account by id", err)
}

// AccountByDevice implements store.Store.
func (s *Store) AccountByDevice(ctx context.Context, tenantID, deviceID string) (store.Account, error) {
	a, err := scanAccount(s.r.QueryRowContext(ctx, `SELECT `+accountCols+` FROM accounts WHERE tenant_id = ? AND device_id = ?`, tenantID, deviceID))
	return a, wrap("account by device", err)
}

// SetDisplayName implements store.Store.
func (s *Store) SetDisplayName(ctx context.Context, tenantID, accountID, name string, at time.Time) error {
	return s.inTx(ctx, "set display name", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET display_name = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`,
			name, toDB(at), tenantID, accountID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return sql.ErrNoRows
		}
		return nil
	})
}

// Modules

const moduleCols = `tenant_id, name, build_id, abi_version, meta_name, tick_rate, max_players, frame_divisor,
	view_format, view_width, view_height, size_bytes, created_at, uploaded_at`

func moduleDest(m *store.Module, created, uploaded *int64) []any {
	return []any{&m.TenantID, &m.Name, &m.BuildID, &m.ABIVersion, &m.MetaName, &m.TickRate, &m.MaxPlayers, &m.FrameDivisor,
		&m.ViewFormat, &m.ViewWidth, &m.ViewHeight, &m.SizeBytes, created, uploaded}
}

func scanModule(row interface{ Scan(...any) error }) (store.Module, error) {
	var m store.Module
	var created, uploaded int64
	err := row.Scan(moduleDest(&m, &created, &uploaded)...)
	m.CreatedAt, m.UploadedAt = fromDB(created), fromDB(uploaded)
	return m, err
}

// PutModule implements store.Store.
func (s *Store) PutModule(ctx context.Context, m store.Module, wasm []byte) (store.Module, error) {
	var out store.Module
	err := s.inTx(ctx, "put module", func(tx *sql.Tx) error {
		at := toDB(m.UploadedAt)
		_, err := tx.ExecContext(ctx, `INSERT INTO modules (`+moduleCols+`, seq, wasm)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM modules), ?)
			ON CONFLICT (tenant_id, name, build_id) DO UPDATE SET
				abi_version = excluded.abi_version, meta_name = excluded.meta_name,
				tick_rate = excluded.tick_rate, max_players = excluded.max_players,
				frame_divisor = excluded.frame_divisor, view_format = excluded.view_format,
				view_width = excluded.view_width, view_height = excluded.view_height,
				uploaded_at = excluded.uploaded_at, seq = excluded.seq`,
			m.TenantID, m.Name, m.BuildID, m.ABIVersion, m.MetaName, m.TickRate, m.MaxPlayers, m.FrameDivisor,
			m.ViewFormat, m.ViewWidth, m.ViewHeight, int64(len(wasm)), at, at, wasm)
		if err != nil {
			return err
		}
		out, err = scanModule(tx.QueryRowContext(ctx, `SELECT `+moduleCols+` FROM modules
			WHERE tenant_id = ? AND name = ? AND build_id = ?`, m.TenantID, m.Name, m.BuildID))
		return err
	})
	return out, err
}

// LatestModule implements store.Store.
func (s *Store) LatestModule(ctx context.Context, tenantID, name string) (store.Module, error) {
	m, err := scanModule(s.r.QueryRowContext(ctx, `SELECT `+moduleCols+` FROM modules
		WHERE tenant_id = ? AND name = ? ORDER BY seq DESC LIMIT 1`, tenantID, name))
	return m, wrap("latest module", err)
}

// GetModule implements store.Store.
func (s *Store) GetModule(ctx context.Context, tenantID, buildID string) (store.Module, []byte, error) {
	var m store.Module
	var created, uploaded int64
	var wasm []byte
	err := s.r.QueryRowContext(ctx, `SELECT `+moduleCols+`, wasm FROM modules
		WHERE tenant_id = ? AND build_id = ? ORDER BY seq DESC LIMIT 1`, tenantID, buildID).
		Scan(append(moduleDest(&m, &created, &uploaded), &wasm)...)
	if err != nil {
		return store.Module{}, nil, wrap("get module", err)
	}
	m.CreatedAt, m.UploadedAt = fromDB(created), fromDB(uploaded)
	return m, wasm, nil
}

// ListModules implements store.Store.
func (s *Store) ListModules(ctx context.Context, tenantID string) ([]store.Module, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+moduleCols+` FROM modules WHERE tenant_id = ? ORDER BY seq DESC`, tenantID)
	if err != nil {
		return nil, wrap("list modules", err)
	}
	defer rows.Close()
	var out []store.Module
	for rows.Next() {
		m, err := scanModule(rows)
		if err != nil {
			return nil, wrap("list modules", err)
		}
		out = append(out, m)
	}
	return out, wrap("list modules", rows.Err())
}

// Signing keys

// ListSigningKeys implements store.Store.
func (s *Store) ListSigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, private_key, created_at, retired_at FROM signing_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, wrap("list signing keys", err)
	}
	defer rows.Close()
	var out []store.SigningKey
	for rows.Next() {
		var k store.SigningKey
		var created int64
		var retired sql.NullInt64
		if err := rows.Scan(&k.ID, &k.Private, &created, &retired); err != nil {
			return nil, wrap("list signing keys", err)
		}
		k.CreatedAt = fromDB(created)
		if retired.Valid {
			k.RetiredAt = fromDB(retired.Int64)
		}
		out = append(out, k)
	}
	return out, wrap("list signing keys", rows.Err())
}

// PutSigningKeys implements store.Store.
func (s *Store) PutSigningKeys(ctx context.Context, keys ...store.SigningKey) error {
	return s.inTx(ctx, "put signing keys", func(tx *sql.Tx) error {
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, `INSERT INTO signing_keys (id, private_key, created_at, retired_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET private_key = excluded.private_key,
					created_at = excluded.created_at, retired_at = excluded.retired_at`,
				k.ID, k.Private, toDB(k.CreatedAt), nullTime(k.RetiredAt)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteSigningKeys implements store.Store.
func (s *Store) DeleteSigningKeys(ctx context.Context, ids ...string) error {
	return s.inTx(ctx, "delete signing keys", func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM signing_keys WHERE id = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
}
