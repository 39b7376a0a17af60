package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"ludus.dev/ludus/backend/store"
)

// Modules

const moduleCols = `tenant_id, name, build_id, abi_version, meta_name, tick_rate, max_players, frame_divisor,
	view_format, view_width, view_height, size_bytes, created_at, uploaded_at`

func moduleDest(m *store.Module, created, uploaded *int64) []any {
	return []any{&m.TenantID, &m.Name, &m.BuildID, &m.ABIVersion, &m.MetaName, &m.TickRate, &m.MaxPlayers, &m.FrameDivisor,
		&m.ViewFormat, &m.ViewWidth, &m.ViewHeight, &m.SizeBytes, created, uploaded}
}

func scanModule(row scanner) (store.Module, error) {
	var m store.Module
	var created, uploaded int64
	err := row.Scan(moduleDest(&m, &created, &uploaded)...)
	m.CreatedAt, m.UploadedAt = FromDB(created), FromDB(uploaded)
	return m, err
}

// PutModule implements store.Store.
func (s *DB) PutModule(ctx context.Context, m store.Module, wasm []byte, bound store.ModuleBound) (store.Module, error) {
	var out store.Module
	err := s.inTx(ctx, "put module", func(tx *tx) error {
		// The tenant's row, written first, is the lock that makes the count
		// below and the insert one step: on PostgreSQL a concurrent put of
		// the same tenant (another backend process) waits here until this
		// transaction ends, then counts what it stored; SQLite takes its
		// one writer's lock with it. Without it two puts could each count
		// the last free slot and both take it. It also answers ErrNotFound
		// for an unknown tenant.
		if err := mustAffect(tx.exec(ctx, `UPDATE tenants SET name = name WHERE id = ?`, m.TenantID)); err != nil {
			return err
		}
		if err := checkModuleBound(ctx, tx, m, int64(len(wasm)), bound); err != nil {
			return err
		}
		at := ToDB(m.UploadedAt)
		_, err := tx.exec(ctx, `INSERT INTO modules (`+moduleCols+`, seq, wasm)
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
		out, err = scanModule(tx.row(ctx, `SELECT `+moduleCols+` FROM modules
			WHERE tenant_id = ? AND name = ? AND build_id = ?`, m.TenantID, m.Name, m.BuildID))
		return err
	})
	return out, err
}

// checkModuleBound refuses m (size bytes) if it would be a new stored build
// taking its tenant past bound. A build the name already has adds nothing:
// putting it again only makes it the newest.
func checkModuleBound(ctx context.Context, tx *tx, m store.Module, size int64, bound store.ModuleBound) error {
	var one int
	err := tx.row(ctx, `SELECT 1 FROM modules WHERE tenant_id = ? AND name = ? AND build_id = ?`,
		m.TenantID, m.Name, m.BuildID).Scan(&one)
	if err == nil {
		return nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var builds int
	var bytes int64
	// size_bytes sits before the wasm column, so this reads no module's bytes.
	if err := tx.row(ctx, `SELECT COUNT(*), CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM modules WHERE tenant_id = ?`,
		m.TenantID).Scan(&builds, &bytes); err != nil {
		return err
	}
	if builds+1 > bound.Builds || bytes+size > bound.Bytes {
		return &store.ModuleLimitError{Builds: builds, Bytes: bytes, Bound: bound}
	}
	return nil
}

// DeleteModule implements store.Store.
func (s *DB) DeleteModule(ctx context.Context, tenantID, buildID, name string) ([]store.Module, error) {
	var out []store.Module
	err := s.inTx(ctx, "delete module", func(tx *tx) error {
		out = nil
		rows, err := tx.query(ctx, `DELETE FROM modules WHERE tenant_id = ? AND build_id = ? AND (? = '' OR name = ?)
			RETURNING `+moduleCols, tenantID, buildID, name, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m, err := scanModule(rows)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return sql.ErrNoRows
		}
		return nil
	})
	return out, err
}

// LatestModule implements store.Store.
func (s *DB) LatestModule(ctx context.Context, tenantID, name string) (store.Module, error) {
	m, err := scanModule(s.row(ctx, `SELECT `+moduleCols+` FROM modules
		WHERE tenant_id = ? AND name = ? ORDER BY seq DESC LIMIT 1`, tenantID, name))
	return m, s.wrap("latest module", err)
}

// GetModule implements store.Store.
func (s *DB) GetModule(ctx context.Context, tenantID, buildID string) (store.Module, []byte, error) {
	var m store.Module
	var created, uploaded int64
	var wasm []byte
	err := s.row(ctx, `SELECT `+moduleCols+`, wasm FROM modules
		WHERE tenant_id = ? AND build_id = ? ORDER BY seq DESC LIMIT 1`, tenantID, buildID).
		Scan(append(moduleDest(&m, &created, &uploaded), &wasm)...)
	if err != nil {
		return store.Module{}, nil, s.wrap("get module", err)
	}
	m.CreatedAt, m.UploadedAt = FromDB(created), FromDB(uploaded)
	return m, wasm, nil
}

// ListModules implements store.Store.
func (s *DB) ListModules(ctx context.Context, tenantID string) ([]store.Module, error) {
	return list(ctx, s, "list modules", scanModule, `SELECT `+moduleCols+` FROM modules WHERE tenant_id = ? ORDER BY seq DESC`, tenantID)
}

// Signing keys

// ListSigningKeys implements store.Store.
func (s *DB) ListSigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	return list(ctx, s, "list signing keys", func(r scanner) (store.SigningKey, error) {
		var k store.SigningKey
		var created int64
		var retired sql.NullInt64
		err := r.Scan(&k.ID, &k.Private, &created, &retired)
		k.CreatedAt, k.RetiredAt = FromDB(created), fromNullTime(retired)
		return k, err
	}, `SELECT id, private_key, created_at, retired_at FROM signing_keys ORDER BY created_at, id`)
}

// PutSigningKeys implements store.Store.
func (s *DB) PutSigningKeys(ctx context.Context, keys ...store.SigningKey) error {
	return s.inTx(ctx, "put signing keys", func(tx *tx) error {
		for _, k := range keys {
			if _, err := tx.exec(ctx, `INSERT INTO signing_keys (id, private_key, created_at, retired_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET private_key = excluded.private_key,
					created_at = excluded.created_at, retired_at = excluded.retired_at`,
				k.ID, k.Private, ToDB(k.CreatedAt), nullTime(k.RetiredAt)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteSigningKeys implements store.Store.
func (s *DB) DeleteSigningKeys(ctx context.Context, ids ...string) error {
	return s.inTx(ctx, "delete signing keys", func(tx *tx) error {
		for _, id := range ids {
			if _, err := tx.exec(ctx, `DELETE FROM signing_keys WHERE id = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
}
