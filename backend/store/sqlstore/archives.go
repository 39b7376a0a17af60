package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"ludus.dev/ludus/backend/store"
)

// PutGameArchive implements store.Store.
func (s *DB) PutGameArchive(ctx context.Context, a store.GameArchive) error {
	size := int64(len(a.SpecJSON))
	for _, c := range a.Chunks {
		size += int64(len(c))
	}
	if a.SpecJSON == nil {
		a.SpecJSON = []byte{}
	}
	return s.inTx(ctx, "put game archive", func(tx *tx) error {
		// The archive's growth of the tenant's stored bytes is metered in
		// the same transaction (tenant_usage, the hour of ArchivedAt): a
		// re-archive counts only its difference.
		var old int64
		var oldGuestLog []byte
		switch err := tx.row(ctx, `SELECT size_bytes, guest_log FROM game_archives WHERE tenant_id = ? AND game_id = ?`,
			a.TenantID, a.GameID).Scan(&old, &oldGuestLog); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		}
		guestLog := a.GuestLog
		if len(guestLog) == 0 {
			// Only the node that ran a game holds its guest log; another
			// node can archive the same finished game too (its sweep read
			// the log before the first archive removed it from etcd). The
			// game and its log are the same in both, so the repeat keeps
			// the guest log it does not carry.
			guestLog = oldGuestLog
		}
		if guestLog == nil {
			guestLog = []byte{}
		}
		size += int64(len(guestLog))
		if _, err := tx.exec(ctx, `DELETE FROM game_archive_chunks WHERE tenant_id = ? AND game_id = ?`, a.TenantID, a.GameID); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `INSERT INTO game_archives (tenant_id, game_id, state, message, final_tick, size_bytes, chunks, archived_at, spec_json, guest_log)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, game_id) DO UPDATE SET state = excluded.state,
			message = excluded.message, final_tick = excluded.final_tick, size_bytes = excluded.size_bytes, chunks = excluded.chunks,
			archived_at = excluded.archived_at, spec_json = excluded.spec_json, guest_log = excluded.guest_log`,
			a.TenantID, a.GameID, a.State, a.Message, a.FinalTick, size, len(a.Chunks), ToDB(a.ArchivedAt), a.SpecJSON, guestLog); err != nil {
			return err
		}
		for i, c := range a.Chunks {
			if c == nil {
				c = []byte{}
			}
			if _, err := tx.exec(ctx, `INSERT INTO game_archive_chunks (tenant_id, game_id, seq, data) VALUES (?, ?, ?, ?)`,
				a.TenantID, a.GameID, i, c); err != nil {
				return err
			}
		}
		if size == old {
			return nil
		}
		_, err := tx.exec(ctx, `INSERT INTO tenant_usage (tenant_id, hour, cpu_micros, player_millis, stream_bytes, etcd_writes,
			archive_bytes, games_timed_out) VALUES (?, ?, 0, 0, 0, 0, ?, 0)
			ON CONFLICT (tenant_id, hour) DO UPDATE SET archive_bytes = tenant_usage.archive_bytes + excluded.archive_bytes`,
			a.TenantID, ToDB(a.ArchivedAt.UTC().Truncate(time.Hour)), size-old)
		return err
	})
}

const archiveCols = `tenant_id, game_id, state, message, final_tick, size_bytes, archived_at`

func scanArchive(r scanner) (store.GameArchive, error) {
	var a store.GameArchive
	var at int64
	err := r.Scan(&a.TenantID, &a.GameID, &a.State, &a.Message, &a.FinalTick, &a.SizeBytes, &at)
	a.ArchivedAt = FromDB(at)
	return a, err
}

// GameArchive implements store.Store. Header, spec and chunks are read in
// one read transaction, so a concurrent re-archive is seen whole or not at all.
func (s *DB) GameArchive(ctx context.Context, tenantID, gameID string) (store.GameArchive, error) {
	var a store.GameArchive
	rtx, err := s.R.BeginTx(ctx, nil)
	if err != nil {
		return a, s.wrap("game archive", err)
	}
	defer rtx.Rollback()
	var n int
	var at int64
	err = rtx.QueryRowContext(ctx, s.q(`SELECT `+archiveCols+`, chunks, spec_json, guest_log FROM game_archives WHERE tenant_id = ? AND game_id = ?`),
		tenantID, gameID).Scan(&a.TenantID, &a.GameID, &a.State, &a.Message, &a.FinalTick, &a.SizeBytes, &at, &n, &a.SpecJSON, &a.GuestLog)
	if err != nil {
		return store.GameArchive{}, s.wrap("game archive", err)
	}
	a.ArchivedAt = FromDB(at)
	rows, err := rtx.QueryContext(ctx, s.q(`SELECT data FROM game_archive_chunks WHERE tenant_id = ? AND game_id = ? ORDER BY seq`), tenantID, gameID)
	if err != nil {
		return store.GameArchive{}, s.wrap("game archive", err)
	}
	defer rows.Close()
	a.Chunks = make([][]byte, 0, n)
	for rows.Next() {
		var c []byte
		if err := rows.Scan(&c); err != nil {
			return store.GameArchive{}, s.wrap("game archive", err)
		}
		a.Chunks = append(a.Chunks, c)
	}
	if err := rows.Err(); err != nil {
		return store.GameArchive{}, s.wrap("game archive", err)
	}
	return a, nil
}

// ListGameArchives implements store.Store.
func (s *DB) ListGameArchives(ctx context.Context, tenantID string, limit int) ([]store.GameArchive, error) {
	return list(ctx, s, "list game archives", scanArchive, `SELECT `+archiveCols+` FROM game_archives
		WHERE tenant_id = ? ORDER BY archived_at DESC, game_id LIMIT ?`, tenantID, limit)
}
