package sqlstore

import (
	"context"
	"errors"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Quotas and metered usage (tables tenant_quotas, tenant_usage and
// usage_reports).

// PutQuotas implements store.Store.
func (s *DB) PutQuotas(ctx context.Context, q store.Quotas) error {
	return s.inTx(ctx, "put quotas", func(tx *tx) error {
		_, err := tx.exec(ctx, `INSERT INTO tenant_quotas (tenant_id, live_games, games_per_minute, cpu_seconds_per_hour,
			archive_bytes, max_game_duration_s, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id) DO UPDATE SET live_games = excluded.live_games, games_per_minute = excluded.games_per_minute,
			cpu_seconds_per_hour = excluded.cpu_seconds_per_hour, archive_bytes = excluded.archive_bytes,
			max_game_duration_s = excluded.max_game_duration_s, updated_at = excluded.updated_at`,
			q.TenantID, q.LiveGames, q.GamesPerMinute, q.CPUSecondsPerHour, q.ArchiveBytes, q.MaxGameDurationS, ToDB(q.UpdatedAt))
		return err
	})
}

// Quotas implements store.Store.
func (s *DB) Quotas(ctx context.Context, tenantID string) (store.Quotas, error) {
	q := store.Quotas{TenantID: tenantID}
	var at int64
	err := s.row(ctx, `SELECT live_games, games_per_minute, cpu_seconds_per_hour, archive_bytes, max_game_duration_s, updated_at
		FROM tenant_quotas WHERE tenant_id = ?`, tenantID).Scan(&q.LiveGames, &q.GamesPerMinute, &q.CPUSecondsPerHour,
		&q.ArchiveBytes, &q.MaxGameDurationS, &at)
	if err != nil {
		if err = s.wrap("quotas", err); errors.Is(err, store.ErrNotFound) {
			return store.Quotas{TenantID: tenantID}, nil
		}
		return store.Quotas{}, err
	}
	q.UpdatedAt = FromDB(at)
	return q, nil
}

// reportIDsKept is how long AddUsage remembers a report id.
const reportIDsKept = 48 * time.Hour

// AddUsage implements store.Store.
func (s *DB) AddUsage(ctx context.Context, reporter, reportID string, at time.Time, recs []store.UsageRecord) (bool, error) {
	applied := false
	err := s.inTx(ctx, "add usage", func(tx *tx) error {
		applied = false
		if _, err := tx.exec(ctx, `DELETE FROM usage_reports WHERE at < ?`, ToDB(at.Add(-reportIDsKept))); err != nil {
			return err
		}
		res, err := tx.exec(ctx, `INSERT INTO usage_reports (reporter, report_id, at) VALUES (?, ?, ?)
			ON CONFLICT (reporter, report_id) DO NOTHING`, reporter, reportID, ToDB(at))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // a report seen before: nothing to add
		}
		for _, r := range recs {
			if _, err := tx.exec(ctx, `INSERT INTO tenant_usage (tenant_id, hour, cpu_micros, player_millis, stream_bytes,
				etcd_writes, archive_bytes, games_timed_out) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (tenant_id, hour) DO UPDATE SET cpu_micros = tenant_usage.cpu_micros + excluded.cpu_micros,
				player_millis = tenant_usage.player_millis + excluded.player_millis,
				stream_bytes = tenant_usage.stream_bytes + excluded.stream_bytes,
				etcd_writes = tenant_usage.etcd_writes + excluded.etcd_writes,
				archive_bytes = tenant_usage.archive_bytes + excluded.archive_bytes,
				games_timed_out = tenant_usage.games_timed_out + excluded.games_timed_out`,
				r.TenantID, ToDB(r.Hour), r.CPUMicros, r.PlayerMillis, r.StreamBytes, r.EtcdWrites, r.ArchiveBytes, r.GamesTimedOut); err != nil {
				return err
			}
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// Usage implements store.Store.
func (s *DB) Usage(ctx context.Context, tenantID string, since time.Time) ([]store.UsageRecord, error) {
	const cols = `SELECT tenant_id, hour, cpu_micros, player_millis, stream_bytes, etcd_writes, archive_bytes, games_timed_out FROM tenant_usage`
	scan := func(r scanner) (store.UsageRecord, error) {
		var u store.UsageRecord
		var hour int64
		err := r.Scan(&u.TenantID, &hour, &u.CPUMicros, &u.PlayerMillis, &u.StreamBytes, &u.EtcdWrites, &u.ArchiveBytes, &u.GamesTimedOut)
		u.Hour = FromDB(hour)
		return u, err
	}
	if tenantID == "" {
		return list(ctx, s, "usage", scan, cols+` WHERE hour >= ? ORDER BY hour, tenant_id`, ToDB(since))
	}
	return list(ctx, s, "usage", scan, cols+` WHERE tenant_id = ? AND hour >= ? ORDER BY hour`, tenantID, ToDB(since))
}

// ArchiveBytes implements store.Store.
func (s *DB) ArchiveBytes(ctx context.Context, tenantID string) (int64, error) {
	var n int64
	err := s.row(ctx, `SELECT COALESCE(SUM(size_bytes), 0) FROM game_archives WHERE tenant_id = ?`, tenantID).Scan(&n)
	return n, s.wrap("archive bytes", err)
}
