// Package sqlstore implements store.Store over database/sql for the SQL
// dialects Ludus supports (SQLite and PostgreSQL). The two share every query:
// they are written with "?" placeholders (rewritten to $n for PostgreSQL),
// INSERT ... ON CONFLICT and RETURNING, which both understand. Each dialect
// package owns its schema (migrations) with the same table and column names,
// and maps its driver's errors to the store's sentinels.
//
// Times are int64 microseconds since the Unix epoch, UTC; flags are integers.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Dialect adapts the shared queries to one database.
type Dialect struct {
	// Name prefixes error messages ("sqlite", "postgres").
	Name string
	// Dollar rewrites "?" placeholders to $1, $2, ...
	Dollar bool
	// MapError returns the store sentinel (store.ErrAlreadyExists,
	// store.ErrNotFound, store.ErrInvalid) err stands for, or nil.
	MapError func(err error) error
	// Retry reports whether a transaction failed in a way worth retrying
	// (serialization failure, deadlock).
	Retry func(err error) bool
	// GroupCommit commits the write transactions of concurrent callers
	// together, in one transaction on one connection (see commit.go).
	GroupCommit bool
	// BatchTimeout, if set, bounds a group commit's batch: a statement
	// stuck on a lock or a dead connection must not hold every write of
	// the process forever (PostgreSQL). SQLite's waits are bounded by its
	// busy timeout, and its driver spends a goroutine on every statement
	// run with a context that can end.
	BatchTimeout time.Duration
	// CacheStatements keeps statements prepared (SQLite; pgx caches
	// prepared statements per connection itself).
	CacheStatements bool
	// BatchSessions runs concurrent DeviceSession calls together, apart
	// from the group commit: one statement for up to maxSessionBatch calls
	// (sessions_batch.go). Needs WritableCTEs (PostgreSQL).
	BatchSessions bool
	// WritableCTEs: the database runs INSERT and UPDATE in WITH clauses
	// (PostgreSQL), so writes that would take a round trip per table take
	// one statement (matches_cte.go, sessions_batch.go).
	WritableCTEs bool
	// Pipeline, if set, sends stmts in one round trip on driverConn (what
	// sql.Conn.Raw passes: a connection of W) and reads their outcomes in
	// order. It returns the index of the first statement that failed and
	// its error; statements after it have no effect (PostgreSQL skips them
	// up to the pipeline's end). failed is -1 if all ran, or if err is not
	// any one statement's (the connection failed). With it (and
	// GroupCommit, WritableCTEs), the group commit begins and commits its
	// transactions itself and sends the statements of a batch's match
	// reports together (commit.go).
	Pipeline func(ctx context.Context, driverConn any, stmts []PipeStmt) (failed int, err error)
}

// PipeStmt is a statement for Dialect.Pipeline: Query has the dialect's
// placeholders.
type PipeStmt struct {
	Query string
	Args  []any
	// Rows, if set, reads the statement's rows (it is called once, and
	// calls Next until it returns false or an error).
	Rows func(Rows) error
	// Tag, if set, checks the statement's command tag ("COMMIT": PostgreSQL
	// answers a COMMIT of a failed transaction with "ROLLBACK").
	Tag func(string) error
}

// Rows are a statement's rows, as *sql.Rows and pgx's rows read them.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
}

// DB is a store.Store over a writer pool and a reader pool (the same pool
// for PostgreSQL).
type DB struct {
	W, R           *sql.DB
	d              Dialect
	qs             sync.Map        // query text -> rewritten text
	c              *committer      // group commit; nil unless Dialect.GroupCommit
	sb             *sessionBatcher // nil unless Dialect.BatchSessions
	wstmts, rstmts stmtCache
}

var _ store.Store = (*DB)(nil)

// New returns a store over w (writes) and r (reads).
func New(w, r *sql.DB, d Dialect) *DB {
	s := &DB{W: w, R: r, d: d}
	if d.GroupCommit {
		s.startCommitter()
	}
	if d.BatchSessions && d.WritableCTEs {
		s.sb = newSessionBatcher(s)
	}
	return s
}

// Close closes both pools.
func (s *DB) Close() error {
	s.stopCommitter()
	if s.sb != nil {
		s.sb.stop()
	}
	if s.R == s.W {
		return s.W.Close()
	}
	return errors.Join(s.R.Close(), s.W.Close())
}

// q rewrites a query for the dialect.
func (s *DB) q(query string) string {
	if !s.d.Dollar {
		return query
	}
	if v, ok := s.qs.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	out := b.String()
	s.qs.Store(query, out)
	return out
}

// ToDB converts a time to the stored integer.
func ToDB(t time.Time) int64 { return t.UnixMicro() }

// FromDB converts a stored integer to a time.
func FromDB(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullTime(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: ToDB(t), Valid: true}
}

func fromNullTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return FromDB(v.Int64)
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// wrap maps errors to the store's sentinel errors.
func (s *DB) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{store.ErrNotFound, store.ErrAlreadyExists, store.ErrInsufficient,
		store.ErrRefreshReused, store.ErrRevoked, store.ErrMatchEnded, store.ErrInvalid, store.ErrLimit} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %s: %w", s.d.Name, op, store.ErrNotFound)
	}
	if s.d.MapError != nil {
		if m := s.d.MapError(err); m != nil {
			return fmt.Errorf("%s: %s: %w (%v)", s.d.Name, op, m, err)
		}
	}
	return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
}

// tx is a transaction with the dialect's query rewriting.
type tx struct {
	s  *DB
	tx *sql.Tx
	// c, if set, replaces tx: a connection on which the group commit began
	// the transaction itself (Dialect.Pipeline).
	c *sql.Conn
	// fixed, if set, replaces the callers' contexts (group commit: a
	// statement interrupted mid-batch could roll back the others' work).
	fixed context.Context
}

func (t *tx) ctx(ctx context.Context) context.Context {
	if t.fixed != nil {
		return t.fixed
	}
	return ctx
}

func (t *tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = t.ctx(ctx)
	if t.c != nil {
		return t.c.ExecContext(ctx, t.s.q(query), args...)
	}
	if st := t.s.writeStmt(query); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, t.s.q(query), args...)
}

func (t *tx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = t.ctx(ctx)
	if t.c != nil {
		return t.c.QueryContext(ctx, t.s.q(query), args...)
	}
	if st := t.s.writeStmt(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, t.s.q(query), args...)
}

func (t *tx) row(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = t.ctx(ctx)
	if t.c != nil {
		return t.c.QueryRowContext(ctx, t.s.q(query), args...)
	}
	if st := t.s.writeStmt(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, t.s.q(query), args...)
}

// errRollback carries an error that must roll back but is not a failure of
// the transaction itself (e.g. ErrRefreshReused after revoking, which must
// commit): see inTx's commitErr.
type commitErr struct{ err error }

func (c commitErr) Error() string { return c.err.Error() }

// inTx runs fn in a write transaction, retrying a few times on
// serialization failures (with Dialect.GroupCommit: in the next group
// commit, see commit.go). fn may run more than once: it must set what it
// returns afresh each time. If fn returns a commitErr, the transaction is
// committed and its error returned.
func (s *DB) inTx(ctx context.Context, op string, fn func(t *tx) error) error {
	return s.inTxSteps(ctx, op, fn, nil)
}

// inTxSteps is inTx for work that the group commit may also run as steps
// (fn's work as two statements: see twoStep); without Dialect.Pipeline it
// runs fn.
func (s *DB) inTxSteps(ctx context.Context, op string, fn func(t *tx) error, steps twoStep) error {
	if s.c != nil {
		if s.d.Pipeline == nil {
			steps = nil
		}
		return s.wrap(op, s.submit(ctx, fn, steps))
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = s.tryTx(ctx, fn)
		if err == nil || s.d.Retry == nil || !s.d.Retry(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
	}
	return s.wrap(op, err)
}

func (s *DB) tryTx(ctx context.Context, fn func(t *tx) error) error {
	sqlTx, err := s.W.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer sqlTx.Rollback()
	if err := fn(&tx{s: s, tx: sqlTx}); err != nil {
		var ce commitErr
		if errors.As(err, &ce) {
			if cerr := sqlTx.Commit(); cerr != nil {
				return cerr
			}
			return ce.err
		}
		return err
	}
	return sqlTx.Commit()
}

func (s *DB) row(ctx context.Context, query string, args ...any) *sql.Row {
	if st := s.readStmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.R.QueryRowContext(ctx, s.q(query), args...)
}

func (s *DB) rows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := s.readStmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.R.QueryContext(ctx, s.q(query), args...)
}

type scanner interface{ Scan(...any) error }

// list runs a read query and scans each row with scan.
func list[T any](ctx context.Context, s *DB, op string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := each(ctx, s, op, scan, func(v T) error {
		out = append(out, v)
		return nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// each runs a read query and calls fn with each row as it is scanned, so
// that the caller need not hold them all. An error of fn ends it and is
// returned as is.
func each[T any](ctx context.Context, s *DB, op string, scan func(scanner) (T, error), fn func(T) error, query string, args ...any) error {
	rows, err := s.rows(ctx, query, args...)
	if err != nil {
		return s.wrap(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return s.wrap(op, err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return s.wrap(op, rows.Err())
}

func mustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sql.ErrNoRows
	}
	return nil
}

// Tenants

// CreateTenant implements store.Store.
func (s *DB) CreateTenant(ctx context.Context, t store.Tenant, keys ...store.APIKey) error {
	return s.inTx(ctx, "create tenant", func(tx *tx) error {
		if _, err := tx.exec(ctx, `INSERT INTO tenants (id, slug, name, created_at) VALUES (?, ?, ?, ?)`,
			t.ID, t.Slug, t.Name, ToDB(t.CreatedAt)); err != nil {
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

func scanTenant(row scanner) (store.Tenant, error) {
	var t store.Tenant
	var created int64
	err := row.Scan(&t.ID, &t.Slug, &t.Name, &created)
	t.CreatedAt = FromDB(created)
	return t, err
}

// TenantByID implements store.Store.
func (s *DB) TenantByID(ctx context.Context, id string) (store.Tenant, error) {
	t, err := scanTenant(s.row(ctx, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, id))
	return t, s.wrap("tenant by id", err)
}

// TenantBySlug implements store.Store.
func (s *DB) TenantBySlug(ctx context.Context, slug string) (store.Tenant, error) {
	t, err := scanTenant(s.row(ctx, `SELECT `+tenantCols+` FROM tenants WHERE slug = ?`, slug))
	return t, s.wrap("tenant by slug", err)
}

// ListTenants implements store.Store.
func (s *DB) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	return list(ctx, s, "list tenants", scanTenant, `SELECT `+tenantCols+` FROM tenants ORDER BY created_at, slug`)
}

// API keys

const apiKeyCols = `id, tenant_id, hash, scope, name, created_at`

func insertAPIKey(ctx context.Context, tx *tx, k store.APIKey) error {
	_, err := tx.exec(ctx, `INSERT INTO api_keys (`+apiKeyCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
		k.ID, k.TenantID, k.Hash, k.Scope, k.Name, ToDB(k.CreatedAt))
	return err
}

func scanAPIKey(row scanner) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	err := row.Scan(&k.ID, &k.TenantID, &k.Hash, &k.Scope, &k.Name, &created)
	k.CreatedAt = FromDB(created)
	return k, err
}

// CreateAPIKey implements store.Store.
func (s *DB) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	return s.inTx(ctx, "create api key", func(tx *tx) error {
		// The count and the insert in one transaction: SQLite's writer is
		// one at a time; on PostgreSQL, two concurrent creations may each
		// see the count below the bound and overshoot it by one each.
		var n int
		if err := tx.row(ctx, `SELECT COUNT(*) FROM api_keys WHERE tenant_id = ?`, k.TenantID).Scan(&n); err != nil {
			return err
		}
		if n >= store.MaxAPIKeysPerTenant {
			return store.ErrLimit
		}
		return insertAPIKey(ctx, tx, k)
	})
}

// APIKeyByHash implements store.Store.
func (s *DB) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	k, err := scanAPIKey(s.row(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE hash = ?`, hash))
	return k, s.wrap("api key by hash", err)
}

// ListAPIKeys implements store.Store.
func (s *DB) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	return list(ctx, s, "list api keys", scanAPIKey,
		`SELECT `+apiKeyCols+` FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
}

// ReplaceAPIKey implements store.Store.
func (s *DB) ReplaceAPIKey(ctx context.Context, tenantID, oldID string, k store.APIKey) error {
	return s.inTx(ctx, "replace api key", func(tx *tx) error {
		if err := mustAffect(tx.exec(ctx, `DELETE FROM api_keys WHERE tenant_id = ? AND id = ?`, tenantID, oldID)); err != nil {
			return err
		}
		return insertAPIKey(ctx, tx, k)
	})
}

// DeleteAPIKey implements store.Store.
func (s *DB) DeleteAPIKey(ctx context.Context, tenantID, keyID string) error {
	return s.inTx(ctx, "delete api key", func(tx *tx) error {
		return mustAffect(tx.exec(ctx, `DELETE FROM api_keys WHERE tenant_id = ? AND id = ?`, tenantID, keyID))
	})
}

// Accounts

const accountCols = `id, tenant_id, device_id, email, password_hash, custom_id, display_name, created_at, updated_at`

func scanAccount(row scanner) (store.Account, error) {
	var a store.Account
	var device, email, custom sql.NullString
	var created, updated int64
	err := row.Scan(&a.ID, &a.TenantID, &device, &email, &a.PasswordHash, &custom, &a.DisplayName, &created, &updated)
	a.DeviceID, a.Email, a.CustomID = device.String, email.String, custom.String
	a.CreatedAt, a.UpdatedAt = FromDB(created), FromDB(updated)
	return a, err
}

// CreateAccount implements store.Store.
func (s *DB) CreateAccount(ctx context.Context, a store.Account) error {
	return s.inTx(ctx, "create account", func(tx *tx) error {
		_, err := tx.exec(ctx, `INSERT INTO accounts (`+accountCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.ID, a.TenantID, nullString(a.DeviceID), nullString(a.Email), a.PasswordHash, nullString(a.CustomID),
			a.DisplayName, ToDB(a.CreatedAt), ToDB(a.UpdatedAt))
		return err
	})
}

func (s *DB) accountBy(ctx context.Context, op, col, tenantID, v string) (store.Account, error) {
	a, err := scanAccount(s.row(ctx, `SELECT `+accountCols+` FROM accounts WHERE tenant_id = ? AND `+col+` = ?`, tenantID, v))
	return a, s.wrap(op, err)
}

// AccountByID implements store.Store.
func (s *DB) AccountByID(ctx context.Context, tenantID, accountID string) (store.Account, error) {
	return s.accountBy(ctx, "account by id", "id", tenantID, accountID)
}

// AccountByDevice implements store.Store.
func (s *DB) AccountByDevice(ctx context.Context, tenantID, deviceID string) (store.Account, error) {
	return s.accountBy(ctx, "account by device", "device_id", tenantID, deviceID)
}

// AccountByEmail implements store.Store.
func (s *DB) AccountByEmail(ctx context.Context, tenantID, email string) (store.Account, error) {
	return s.accountBy(ctx, "account by email", "email", tenantID, email)
}

// AccountByCustomID implements store.Store.
func (s *DB) AccountByCustomID(ctx context.Context, tenantID, customID string) (store.Account, error) {
	return s.accountBy(ctx, "account by custom id", "custom_id", tenantID, customID)
}

// SetDisplayName implements store.Store.
func (s *DB) SetDisplayName(ctx context.Context, tenantID, accountID, name string, at time.Time) error {
	return s.inTx(ctx, "set display name", func(tx *tx) error {
		return mustAffect(tx.exec(ctx, `UPDATE accounts SET display_name = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`,
			name, ToDB(at), tenantID, accountID))
	})
}

// UpdateAccount implements store.Store.
func (s *DB) UpdateAccount(ctx context.Context, a store.Account) error {
	return s.inTx(ctx, "update account", func(tx *tx) error {
		return mustAffect(tx.exec(ctx, `UPDATE accounts SET device_id = ?, email = ?, password_hash = ?, custom_id = ?,
			display_name = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`,
			nullString(a.DeviceID), nullString(a.Email), a.PasswordHash, nullString(a.CustomID),
			a.DisplayName, ToDB(a.UpdatedAt), a.TenantID, a.ID))
	})
}

// DeleteAccount implements store.Store. Rows of the account in other tables
// go with it (ON DELETE CASCADE).
func (s *DB) DeleteAccount(ctx context.Context, tenantID, accountID string) error {
	return s.inTx(ctx, "delete account", func(tx *tx) error {
		return mustAffect(tx.exec(ctx, `DELETE FROM accounts WHERE tenant_id = ? AND id = ?`, tenantID, accountID))
	})
}

// DeviceSession implements store.Store. For a new device it is two
// statements (insert the account, insert the refresh token) in one
// transaction: one commit per guest login. With Dialect.BatchSessions,
// concurrent calls share statements and a commit (sessions_batch.go).
func (s *DB) DeviceSession(ctx context.Context, a store.Account, rename string, t store.RefreshToken) (store.Account, bool, error) {
	if s.sb != nil {
		return s.sb.submit(ctx, a, rename, t)
	}
	return s.deviceSessionTx(ctx, a, rename, t)
}

// deviceSessionTx is DeviceSession in a transaction of its own.
func (s *DB) deviceSessionTx(ctx context.Context, a store.Account, rename string, t store.RefreshToken) (store.Account, bool, error) {
	var acc store.Account
	var created bool
	err := s.inTx(ctx, "device session", func(tx *tx) error {
		acc, created = a, false
		res, err := tx.exec(ctx, `INSERT INTO accounts (`+accountCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			a.ID, a.TenantID, nullString(a.DeviceID), nullString(a.Email), a.PasswordHash, nullString(a.CustomID),
			a.DisplayName, ToDB(a.CreatedAt), ToDB(a.UpdatedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			created = true
		} else {
			if acc, err = scanAccount(tx.row(ctx, `SELECT `+accountCols+` FROM accounts WHERE tenant_id = ? AND device_id = ?`,
				a.TenantID, a.DeviceID)); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					// The insert conflicted on something else than the
					// device (an id collision): report it as such.
					return store.ErrAlreadyExists
				}
				return err
			}
			if err := renameIn(ctx, tx, &acc, rename, a.UpdatedAt); err != nil {
				return err
			}
		}
		t.TenantID, t.AccountID = acc.TenantID, acc.ID
		return insertRefresh(ctx, tx, t)
	})
	if err != nil {
		return store.Account{}, false, err
	}
	return acc, created, nil
}

// renameIn renames acc to rename if that is set and differs.
func renameIn(ctx context.Context, tx *tx, acc *store.Account, rename string, at time.Time) error {
	if rename == "" || rename == acc.DisplayName {
		return nil
	}
	if _, err := tx.exec(ctx, `UPDATE accounts SET display_name = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`,
		rename, ToDB(at), acc.TenantID, acc.ID); err != nil {
		return err
	}
	acc.DisplayName, acc.UpdatedAt = rename, at
	return nil
}

// Login throttling

// LoginThrottle implements store.Store.
func (s *DB) LoginThrottle(ctx context.Context, tenantID, key string) (store.LoginThrottle, error) {
	var t store.LoginThrottle
	var last, locked int64
	err := s.row(ctx, `SELECT failures, last_failure, locked_until FROM login_throttles WHERE tenant_id = ? AND key = ?`,
		tenantID, key).Scan(&t.Failures, &last, &locked)
	if errors.Is(err, sql.ErrNoRows) {
		return store.LoginThrottle{}, nil
	}
	if err != nil {
		return t, s.wrap("login throttle", err)
	}
	if last != 0 {
		t.LastFailure = FromDB(last)
	}
	if locked != 0 {
		t.LockedUntil = FromDB(locked)
	}
	return t, nil
}

func zeroOr(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return ToDB(t)
}

// DeleteStaleLoginThrottles implements store.Store. The table holds a row
// per email with recent failures only, once swept: no index on the times.
func (s *DB) DeleteStaleLoginThrottles(ctx context.Context, failedBefore, now time.Time, limit int) (int, error) {
	return s.deleteRows(ctx, "delete stale login throttles", `DELETE FROM login_throttles WHERE (tenant_id, key) IN
		(SELECT tenant_id, key FROM login_throttles WHERE last_failure < ? AND locked_until < ? LIMIT ?)`,
		ToDB(failedBefore), ToDB(now), limit)
}

// deleteRows runs a DELETE in a transaction of its own and returns how
// many rows it deleted.
func (s *DB) deleteRows(ctx context.Context, what, query string, args ...any) (int, error) {
	var n int64
	err := s.inTx(ctx, what, func(tx *tx) error {
		res, err := tx.exec(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// PutLoginThrottle implements store.Store.
func (s *DB) PutLoginThrottle(ctx context.Context, tenantID, key string, t store.LoginThrottle) error {
	return s.inTx(ctx, "put login throttle", func(tx *tx) error {
		if t == (store.LoginThrottle{}) {
			_, err := tx.exec(ctx, `DELETE FROM login_throttles WHERE tenant_id = ? AND key = ?`, tenantID, key)
			return err
		}
		_, err := tx.exec(ctx, `INSERT INTO login_throttles (tenant_id, key, failures, last_failure, locked_until)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, key) DO UPDATE SET failures = excluded.failures,
			last_failure = excluded.last_failure, locked_until = excluded.locked_until`,
			tenantID, key, t.Failures, zeroOr(t.LastFailure), zeroOr(t.LockedUntil))
		return err
	})
}

// Refresh tokens

func insertRefresh(ctx context.Context, tx *tx, t store.RefreshToken) error {
	_, err := tx.exec(ctx, `INSERT INTO refresh_tokens (hash, family_id, tenant_id, account_id, created_at, expires_at, used_at, revoked)
		VALUES (?, ?, ?, ?, ?, ?, NULL, 0)`, t.Hash, t.FamilyID, t.TenantID, t.AccountID, ToDB(t.CreatedAt), ToDB(t.ExpiresAt))
	return err
}

// CreateRefreshToken implements store.Store.
func (s *DB) CreateRefreshToken(ctx context.Context, t store.RefreshToken) error {
	return s.inTx(ctx, "create refresh token", func(tx *tx) error { return insertRefresh(ctx, tx, t) })
}

// UseRefreshToken implements store.Store.
func (s *DB) UseRefreshToken(ctx context.Context, hash []byte, at time.Time, next store.RefreshToken) (store.RefreshToken, error) {
	var old store.RefreshToken
	err := s.inTx(ctx, "use refresh token", func(tx *tx) error {
		// Mark used first: the UPDATE takes the row lock, so of two
		// concurrent uses exactly one sees used_at IS NULL.
		res, err := tx.exec(ctx, `UPDATE refresh_tokens SET used_at = ? WHERE hash = ? AND used_at IS NULL AND revoked = 0 AND expires_at > ?`,
			ToDB(at), hash, ToDB(at))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		var created, expires int64
		var used sql.NullInt64
		var revoked int
		if err := tx.row(ctx, `SELECT family_id, tenant_id, account_id, created_at, expires_at, used_at, revoked FROM refresh_tokens WHERE hash = ?`, hash).
			Scan(&old.FamilyID, &old.TenantID, &old.AccountID, &created, &expires, &used, &revoked); err != nil {
			return err
		}
		old.Hash, old.CreatedAt, old.ExpiresAt = hash, FromDB(created), FromDB(expires)
		if n == 0 {
			if revoked != 0 || !FromDB(expires).After(at) {
				return store.ErrRevoked
			}
			// Used before: theft or a replay. Revoke the family, and commit that.
			if err := revokeFamily(ctx, tx, old.AccountID, old.FamilyID); err != nil {
				return err
			}
			return commitErr{store.ErrRefreshReused}
		}
		next.FamilyID, next.TenantID, next.AccountID = old.FamilyID, old.TenantID, old.AccountID
		if err := insertRefresh(ctx, tx, next); err != nil {
			return err
		}
		// Forget the used tokens beyond the newest RefreshReuseMemory: a
		// client (or a loop) refreshing every few seconds would otherwise
		// keep a row per use for RefreshTTL. Up to forgetBatch a use, so a
		// family left long (from before this bound) shrinks over a few.
		_, err = tx.exec(ctx, `DELETE FROM refresh_tokens WHERE hash IN (SELECT hash FROM refresh_tokens
			WHERE account_id = ? AND family_id = ? AND used_at IS NOT NULL ORDER BY used_at DESC, hash LIMIT ? OFFSET ?)`,
			old.AccountID, old.FamilyID, forgetBatch, store.RefreshReuseMemory)
		return err
	})
	if err != nil {
		return store.RefreshToken{}, err
	}
	return old, nil
}

// RevokeRefreshFamily implements store.Store.
func (s *DB) RevokeRefreshFamily(ctx context.Context, hash []byte) error {
	return s.inTx(ctx, "revoke refresh family", func(tx *tx) error {
		var account, family string
		if err := tx.row(ctx, `SELECT account_id, family_id FROM refresh_tokens WHERE hash = ?`, hash).Scan(&account, &family); err != nil {
			return err
		}
		return revokeFamily(ctx, tx, account, family)
	})
}

// RevokeAccountRefreshTokens implements store.Store. The account's tokens
// are found by the (account_id, family_id) index; the tenant is checked
// through the account, so another tenant's id revokes nothing.
func (s *DB) RevokeAccountRefreshTokens(ctx context.Context, tenantID, accountID string) error {
	return s.inTx(ctx, "revoke account refresh tokens", func(tx *tx) error {
		_, err := tx.exec(ctx, `UPDATE refresh_tokens SET revoked = 1 WHERE account_id = ?
			AND EXISTS (SELECT 1 FROM accounts WHERE tenant_id = ? AND id = ?)`, accountID, tenantID, accountID)
		return err
	})
}

// revokeFamily revokes every token of a family. A family is one account's
// (each token inherits the account of the one it replaced), so the lookup
// is by (account_id, family_id): the index that also serves deleting an
// account's tokens (SQLite schema 10, PostgreSQL 9; before, two indexes,
// one per column).
func revokeFamily(ctx context.Context, tx *tx, accountID, familyID string) error {
	_, err := tx.exec(ctx, `UPDATE refresh_tokens SET revoked = 1 WHERE account_id = ? AND family_id = ?`, accountID, familyID)
	return err
}

// DeleteExpiredRefreshTokens implements store.Store. The subquery takes the
// oldest by the expiry index; DELETE has no LIMIT in PostgreSQL.
func (s *DB) DeleteExpiredRefreshTokens(ctx context.Context, now time.Time, limit int) (int, error) {
	return s.deleteRows(ctx, "delete expired refresh tokens", `DELETE FROM refresh_tokens WHERE hash IN
		(SELECT hash FROM refresh_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`, ToDB(now), limit)
}

// DeleteUnreportedMatches implements store.Store. The subquery reads the
// partial index matches_unreported, which holds only matches without a
// report: the predicate is written as the index's so that both stores use it.
func (s *DB) DeleteUnreportedMatches(ctx context.Context, now time.Time, limit int) (int, error) {
	// The conditions again outside the subquery: a report that claims a
	// match the subquery chose commits before the DELETE can lock its row,
	// and PostgreSQL then re-checks only the outer WHERE on the row it
	// committed (the subquery keeps its snapshot), so without them the
	// sweep deleted a match whose result had just been applied.
	return s.deleteRows(ctx, "delete unreported matches", `DELETE FROM matches WHERE (tenant_id, id) IN
		(SELECT tenant_id, id FROM matches WHERE last_seq = 0 AND ended_at IS NULL AND expires_at <= ?
		ORDER BY expires_at LIMIT ?) AND last_seq = 0 AND ended_at IS NULL`, ToDB(now), limit)
}

// forgetBatch is how many surplus used tokens one refresh deletes.
const forgetBatch = 64

// TrimRefreshFamilies implements store.Store. Finding the accounts reads
// the (account_id, family_id) index whole: the sweep that calls it runs
// hourly.
func (s *DB) TrimRefreshFamilies(ctx context.Context, keep, accounts int) (trimmed, deleted int, err error) {
	ids, err := list(ctx, s, "refresh families", func(r scanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, `SELECT account_id FROM refresh_tokens GROUP BY account_id HAVING COUNT(DISTINCT family_id) > ? ORDER BY account_id LIMIT ?`, keep, accounts)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range ids {
		n, err := s.deleteRows(ctx, "trim refresh families", `DELETE FROM refresh_tokens WHERE account_id = ? AND family_id IN
			(SELECT family_id FROM refresh_tokens WHERE account_id = ? GROUP BY family_id
			ORDER BY MAX(created_at) DESC, family_id LIMIT ? OFFSET ?)`, id, id, maxTrimFamilies, keep)
		if err != nil {
			return trimmed, deleted, err
		}
		trimmed++
		deleted += n
	}
	return trimmed, deleted, nil
}

// maxTrimFamilies bounds the families one trim of an account deletes (one
// transaction); the sweep trims again until none is left over.
const maxTrimFamilies = 10_000

// Progression

// ApplyChange implements store.Store.
func (s *DB) ApplyChange(ctx context.Context, c store.Change) (bool, error) {
	var applied bool
	err := s.inTx(ctx, "apply change", func(tx *tx) error {
		if err := accountExists(ctx, tx, c.TenantID, c.AccountID); err != nil {
			return err
		}
		var err error
		applied, err = applyChange(ctx, tx, c)
		return err
	})
	return applied, err
}

func accountExists(ctx context.Context, tx *tx, tenantID, accountID string) error {
	var one int
	return tx.row(ctx, `SELECT 1 FROM accounts WHERE tenant_id = ? AND id = ?`, tenantID, accountID).Scan(&one)
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks) // a fixed order avoids deadlocks between transactions
	return ks
}

// applyChange applies c inside tx; the account must exist.
func applyChange(ctx context.Context, tx *tx, c store.Change) (bool, error) {
	res, err := tx.exec(ctx, `INSERT INTO changes_applied (tenant_id, account_id, key, at) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant_id, account_id, key) DO NOTHING`, c.TenantID, c.AccountID, c.Key, ToDB(c.At))
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, err
	} else if n == 0 {
		return false, nil
	}
	if err := checkChangeCaps(ctx, tx, c); err != nil {
		return false, err
	}
	if c.XP != 0 {
		var xp int64
		if err := tx.row(ctx, `INSERT INTO progression (tenant_id, account_id, xp) VALUES (?, ?, ?)
			ON CONFLICT (tenant_id, account_id) DO UPDATE SET xp = progression.xp + excluded.xp RETURNING xp`,
			c.TenantID, c.AccountID, c.XP).Scan(&xp); err != nil {
			return false, err
		}
		if xp < 0 {
			return false, fmt.Errorf("xp would be %d: %w", xp, store.ErrInsufficient)
		}
	}
	for _, cur := range sortedKeys(c.Currency) {
		d := c.Currency[cur]
		if d == 0 {
			continue
		}
		var bal int64
		if err := tx.row(ctx, `INSERT INTO wallet (tenant_id, account_id, currency, balance) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant_id, account_id, currency) DO UPDATE SET balance = wallet.balance + excluded.balance RETURNING balance`,
			c.TenantID, c.AccountID, cur, d).Scan(&bal); err != nil {
			return false, err
		}
		if bal < 0 {
			return false, fmt.Errorf("%s balance would be %d: %w", cur, bal, store.ErrInsufficient)
		}
		if _, err := tx.exec(ctx, `INSERT INTO ledger (tenant_id, account_id, currency, delta, balance, key, reason, at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, c.TenantID, c.AccountID, cur, d, bal, c.Key, c.Reason, ToDB(c.At)); err != nil {
			return false, err
		}
	}
	for _, item := range sortedKeys(c.Items) {
		d := c.Items[item]
		if d == 0 {
			continue
		}
		var q int64
		if err := tx.row(ctx, `INSERT INTO inventory (tenant_id, account_id, item, quantity) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant_id, account_id, item) DO UPDATE SET quantity = inventory.quantity + excluded.quantity RETURNING quantity`,
			c.TenantID, c.AccountID, item, d).Scan(&q); err != nil {
			return false, err
		}
		if q < 0 {
			return false, fmt.Errorf("%s count would be %d: %w", item, q, store.ErrInsufficient)
		}
		if q == 0 {
			// No longer held: the row would only take room (and an item
			// at zero is not shown, nor counted against the cap).
			if _, err := tx.exec(ctx, `DELETE FROM inventory WHERE tenant_id = ? AND account_id = ? AND item = ?`,
				c.TenantID, c.AccountID, item); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// Progression implements store.Store.
func (s *DB) Progression(ctx context.Context, tenantID, accountID string) (store.Progression, error) {
	p := store.Progression{Currency: map[string]int64{}, Items: map[string]int64{}}
	err := s.row(ctx, `SELECT xp FROM progression WHERE tenant_id = ? AND account_id = ?`, tenantID, accountID).Scan(&p.XP)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return p, s.wrap("progression", err)
	}
	for _, q := range []struct {
		query string
		into  map[string]int64
	}{
		{`SELECT currency, balance FROM wallet WHERE tenant_id = ? AND account_id = ?`, p.Currency},
		{`SELECT item, quantity FROM inventory WHERE tenant_id = ? AND account_id = ? AND quantity <> 0`, p.Items},
	} {
		type kv struct {
			k string
			v int64
		}
		rows, err := list(ctx, s, "progression", func(r scanner) (kv, error) {
			var x kv
			return x, r.Scan(&x.k, &x.v)
		}, q.query, tenantID, accountID)
		if err != nil {
			return p, err
		}
		for _, r := range rows {
			q.into[r.k] = r.v
		}
	}
	return p, nil
}

const ledgerCols = `seq, currency, delta, balance, key, reason, at`

func scanLedgerEntry(r scanner) (store.LedgerEntry, error) {
	var e store.LedgerEntry
	var at int64
	err := r.Scan(&e.Seq, &e.Currency, &e.Delta, &e.Balance, &e.Key, &e.Reason, &at)
	e.At = FromDB(at)
	return e, err
}

// Ledger implements store.Store.
func (s *DB) Ledger(ctx context.Context, tenantID, accountID string, limit int) ([]store.LedgerEntry, error) {
	return list(ctx, s, "ledger", scanLedgerEntry, `SELECT `+ledgerCols+` FROM ledger WHERE tenant_id = ? AND account_id = ?
		ORDER BY seq DESC LIMIT ?`, tenantID, accountID, limit)
}

// EachLedgerEntry implements store.Store (the ledger_account index gives
// the rows in order).
func (s *DB) EachLedgerEntry(ctx context.Context, tenantID, accountID string, fn func(store.LedgerEntry) error) error {
	return each(ctx, s, "each ledger entry", scanLedgerEntry, fn, `SELECT `+ledgerCols+` FROM ledger
		WHERE tenant_id = ? AND account_id = ? ORDER BY seq DESC`, tenantID, accountID)
}

// Matches

const matchCols = `tenant_id, id, game, credential_hash, created_at, expires_at, ended_at, last_seq`

func scanMatch(row scanner) (store.Match, error) {
	var m store.Match
	var created, expires int64
	var ended sql.NullInt64
	err := row.Scan(&m.TenantID, &m.ID, &m.Game, &m.CredentialHash, &created, &expires, &ended, &m.LastSeq)
	m.CreatedAt, m.ExpiresAt, m.EndedAt = FromDB(created), FromDB(expires), fromNullTime(ended)
	return m, err
}

// CreateMatch implements store.Store.
func (s *DB) CreateMatch(ctx context.Context, m store.Match) error {
	return s.inTx(ctx, "create match", func(tx *tx) error {
		_, err := tx.exec(ctx, `INSERT INTO matches (`+matchCols+`) VALUES (?, ?, ?, ?, ?, ?, NULL, 0)`,
			m.TenantID, m.ID, m.Game, m.CredentialHash, ToDB(m.CreatedAt), ToDB(m.ExpiresAt))
		return err
	})
}

// MatchByCredential implements store.Store.
func (s *DB) MatchByCredential(ctx context.Context, hash []byte) (store.Match, error) {
	m, err := scanMatch(s.row(ctx, `SELECT `+matchCols+` FROM matches WHERE credential_hash = ?`, hash))
	return m, s.wrap("match by credential", err)
}

func encodeMap(m map[string]int64) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // map[string]int64 always encodes
	return string(b)
}

func decodeMap(s string) (map[string]int64, error) {
	m := map[string]int64{}
	if s == "" {
		return m, nil
	}
	return m, json.Unmarshal([]byte(s), &m)
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// playerCols are a player's columns of match_players, as scanPlayer reads
// them (with the table's alias p).
const playerCols = `p.account_id, p.score, p.duration_ms, p.damage, p.items_used, p.xp, p.currency, p.items, p.stats, p.place, p.team`

// scanPlayer reads playerCols after the columns in dest. ok is false if the
// player columns are NULL (a LEFT JOIN that found no player).
func scanPlayer(r scanner, dest ...any) (p store.PlayerReport, ok bool, err error) {
	var account, used, cur, items, stats sql.NullString
	var score, duration, damage, xp, place, team sql.NullInt64
	dest = append(dest, &account, &score, &duration, &damage, &used, &xp, &cur, &items, &stats, &place, &team)
	if err := r.Scan(dest...); err != nil || !account.Valid {
		return p, false, err
	}
	p = store.PlayerReport{AccountID: account.String, Score: score.Int64, DurationMs: duration.Int64, Damage: damage.Int64,
		XP: xp.Int64, Place: int(place.Int64), Team: int(team.Int64)}
	for _, m := range []struct {
		into *map[string]int64
		from string
	}{{&p.Stats, stats.String}, {&p.ItemsUsed, used.String}, {&p.Currency, cur.String}, {&p.Items, items.String}} {
		if *m.into, err = decodeMap(m.from); err != nil {
			return p, false, err
		}
	}
	return p, true, nil
}

// MatchResult implements store.Store.
func (s *DB) MatchResult(ctx context.Context, tenantID, matchID string) (store.MatchResult, error) {
	rs, err := s.matchResults(ctx, "match result", `SELECT tenant_id, id, game, ended_at FROM matches
		WHERE tenant_id = ? AND id = ? AND ended_at IS NOT NULL`, tenantID, matchID)
	if err != nil {
		return store.MatchResult{}, err
	}
	if len(rs) == 0 {
		return store.MatchResult{}, s.wrap("match result", sql.ErrNoRows)
	}
	return rs[0], nil
}

// ListMatchResults implements store.Store.
func (s *DB) ListMatchResults(ctx context.Context, tenantID, accountID string, limit int) ([]store.MatchResult, error) {
	if accountID == "" {
		return s.matchResults(ctx, "list match results", `SELECT tenant_id, id, game, ended_at FROM matches
			WHERE tenant_id = ? AND ended_at IS NOT NULL ORDER BY ended_at DESC, id LIMIT ?`, tenantID, limit)
	}
	return s.matchResults(ctx, "list match results", AccountMatchResultsQuery, tenantID, accountID, limit)
}

// AccountMatchResultsQuery selects an account's newest ended matches
// (ListMatchResults of one account). It starts from the account's rows
// (match_players_account): CROSS JOIN fixes that order in SQLite, which
// would otherwise walk every ended match of the tenant newest first and
// look for the account in each, and the tenant is compared as an
// expression so that no index on it competes (as EachAccountMatch does).
const AccountMatchResultsQuery = `SELECT m.tenant_id, m.id, m.game, m.ended_at FROM match_players a
		CROSS JOIN matches m WHERE m.tenant_id = a.tenant_id AND m.id = a.match_id
		AND a.tenant_id || '' = ? AND a.account_id = ? AND m.ended_at IS NOT NULL ORDER BY m.ended_at DESC, m.id LIMIT ?`

// matchResults reads the results that matches (a query of tenant_id, id,
// game, ended_at) selects, with their players, in one query: the players
// of every match joined to it, not a query per match.
func (s *DB) matchResults(ctx context.Context, op, matches string, args ...any) ([]store.MatchResult, error) {
	type row struct {
		m      store.MatchResult
		p      store.PlayerReport
		player bool // p is set: the match has players
	}
	var out []store.MatchResult
	err := each(ctx, s, op, func(r scanner) (row, error) {
		var x row
		var ended int64
		var err error
		x.p, x.player, err = scanPlayer(r, &x.m.TenantID, &x.m.MatchID, &x.m.Game, &ended)
		x.m.EndedAt = FromDB(ended)
		return x, err
	}, func(x row) error {
		// The rows of a match follow each other (ORDER BY).
		if n := len(out); n == 0 || out[n-1].MatchID != x.m.MatchID {
			out = append(out, x.m)
		}
		if x.player {
			out[len(out)-1].Players = append(out[len(out)-1].Players, x.p)
		}
		return nil
	}, `SELECT m.tenant_id, m.id, m.game, m.ended_at, `+playerCols+`
		FROM (`+matches+`) m LEFT JOIN match_players p ON p.tenant_id = m.tenant_id AND p.match_id = m.id
		ORDER BY m.ended_at DESC, m.id, p.score DESC, p.account_id`, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachAccountMatch implements store.Store. CROSS JOIN: SQLite would
// otherwise start from matches_ended, every ended match of the tenant,
// rather than the account's rows (match_players_account; export.go).
func (s *DB) EachAccountMatch(ctx context.Context, tenantID, accountID string, fn func(store.AccountMatch) error) error {
	return each(ctx, s, "each account match", func(r scanner) (store.AccountMatch, error) {
		var m store.AccountMatch
		var created, ended int64
		p, _, err := scanPlayer(r, &m.MatchID, &m.Game, &created, &ended)
		m.CreatedAt, m.EndedAt, m.Player = FromDB(created), FromDB(ended), p
		return m, err
	}, fn, `SELECT m.id, m.game, m.created_at, m.ended_at, `+playerCols+` FROM match_players p
		CROSS JOIN matches m WHERE m.tenant_id = p.tenant_id AND m.id = p.match_id
		AND p.tenant_id || '' = ? AND p.account_id = ? AND m.ended_at IS NOT NULL ORDER BY m.ended_at DESC, m.id`, tenantID, accountID)
}

func boardCol(byBest bool) string {
	if byBest {
		return "best"
	}
	return "total"
}

// Leaderboard implements store.Store.
func (s *DB) Leaderboard(ctx context.Context, tenantID, game string, byBest bool, offset, limit int) ([]store.LeaderboardEntry, error) {
	col := boardCol(byBest)
	rank := int64(offset)
	return list(ctx, s, "leaderboard", func(r scanner) (store.LeaderboardEntry, error) {
		var e store.LeaderboardEntry
		err := r.Scan(&e.AccountID, &e.Best, &e.Sum, &e.Matches)
		rank++
		e.Rank = rank
		return e, err
	}, `SELECT account_id, best, total, matches FROM leaderboard WHERE tenant_id = ? AND game = ?
		ORDER BY `+col+` DESC, account_id LIMIT ? OFFSET ?`, tenantID, game, limit, offset)
}

// LeaderboardRank implements store.Store.
func (s *DB) LeaderboardRank(ctx context.Context, tenantID, game string, byBest bool, accountID string) (store.LeaderboardEntry, error) {
	col := boardCol(byBest)
	var e store.LeaderboardEntry
	err := s.row(ctx, `SELECT l.account_id, l.best, l.total, l.matches,
		(SELECT COUNT(*) FROM leaderboard o WHERE o.tenant_id = l.tenant_id AND o.game = l.game
			AND (o.`+col+` > l.`+col+` OR (o.`+col+` = l.`+col+` AND o.account_id < l.account_id))) + 1
		FROM leaderboard l WHERE l.tenant_id = ? AND l.game = ? AND l.account_id = ?`, tenantID, game, accountID).
		Scan(&e.AccountID, &e.Best, &e.Sum, &e.Matches, &e.Rank)
	return e, s.wrap("leaderboard rank", err)
}

// Webhooks

// PutWebhook implements store.Store.
func (s *DB) PutWebhook(ctx context.Context, w store.Webhook) error {
	return s.inTx(ctx, "put webhook", func(tx *tx) error {
		if w.URL == "" {
			_, err := tx.exec(ctx, `DELETE FROM webhooks WHERE tenant_id = ?`, w.TenantID)
			return err
		}
		_, err := tx.exec(ctx, `INSERT INTO webhooks (tenant_id, url, secret) VALUES (?, ?, ?)
			ON CONFLICT (tenant_id) DO UPDATE SET url = excluded.url, secret = excluded.secret`, w.TenantID, w.URL, w.Secret)
		return err
	})
}

// Webhook implements store.Store.
func (s *DB) Webhook(ctx context.Context, tenantID string) (store.Webhook, error) {
	w := store.Webhook{TenantID: tenantID}
	err := s.row(ctx, `SELECT url, secret FROM webhooks WHERE tenant_id = ?`, tenantID).Scan(&w.URL, &w.Secret)
	return w, s.wrap("webhook", err)
}

const deliveryCols = `id, tenant_id, event, payload, state, attempts, next_at, last_error, created_at, updated_at`

func scanDelivery(r scanner) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	var next, created, updated int64
	err := r.Scan(&d.ID, &d.TenantID, &d.Event, &d.Payload, &d.State, &d.Attempts, &next, &d.LastError, &created, &updated)
	d.NextAt, d.CreatedAt, d.UpdatedAt = FromDB(next), FromDB(created), FromDB(updated)
	return d, err
}

func insertDelivery(ctx context.Context, tx *tx, d store.WebhookDelivery) error {
	if d.State == "" {
		d.State = store.DeliveryPending
	}
	_, err := tx.exec(ctx, `INSERT INTO webhook_deliveries (`+deliveryCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.ID, d.TenantID, d.Event, d.Payload, d.State, d.Attempts, ToDB(d.NextAt), d.LastError, ToDB(d.CreatedAt), ToDB(d.UpdatedAt))
	return err
}

// DueDeliveries implements store.Store.
func (s *DB) DueDeliveries(ctx context.Context, at, leaseUntil time.Time, limit int) ([]store.WebhookDelivery, error) {
	var out []store.WebhookDelivery
	err := s.inTx(ctx, "due deliveries", func(tx *tx) error {
		out = out[:0]
		rows, err := tx.query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE state = ? AND next_at <= ?
			ORDER BY next_at, id LIMIT ?`, store.DeliveryPending, ToDB(at), limit)
		if err != nil {
			return err
		}
		var due []store.WebhookDelivery
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return err
			}
			due = append(due, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, d := range due {
			// Lease it unless another replica did meanwhile.
			res, err := tx.exec(ctx, `UPDATE webhook_deliveries SET next_at = ? WHERE id = ? AND state = ? AND next_at = ?`,
				ToDB(leaseUntil), d.ID, store.DeliveryPending, ToDB(d.NextAt))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				out = append(out, d)
			}
		}
		return nil
	})
	return out, err
}

// UpdateDelivery implements store.Store.
func (s *DB) UpdateDelivery(ctx context.Context, d store.WebhookDelivery) error {
	return s.inTx(ctx, "update delivery", func(tx *tx) error {
		return mustAffect(tx.exec(ctx, `UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ?, last_error = ?, updated_at = ?
			WHERE id = ?`, d.State, d.Attempts, ToDB(d.NextAt), d.LastError, ToDB(d.UpdatedAt), d.ID))
	})
}

// DeleteFinishedDeliveries implements store.Store. A finished delivery's
// next_at is the time its last attempt was due, at or before the attempt
// (updated_at): the (state, next_at) index finds every candidate, and
// updated_at decides.
func (s *DB) DeleteFinishedDeliveries(ctx context.Context, before time.Time, limit int) (int, error) {
	total := 0
	for _, state := range []string{store.DeliveryDelivered, store.DeliveryFailed} {
		if total >= limit {
			break
		}
		n, err := s.deleteRows(ctx, "delete finished deliveries", `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
			WHERE state = ? AND next_at < ? AND updated_at < ? ORDER BY next_at LIMIT ?)`, state, ToDB(before), ToDB(before), limit-total)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ListDeliveries implements store.Store.
func (s *DB) ListDeliveries(ctx context.Context, tenantID string, limit int) ([]store.WebhookDelivery, error) {
	return list(ctx, s, "list deliveries", scanDelivery, `SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE tenant_id = ? ORDER BY created_at DESC, id LIMIT ?`, tenantID, limit)
}
