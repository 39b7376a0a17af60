package sqlstore

import (
	"context"
	"fmt"
	"time"

	"ludus.dev/ludus/backend/store"
)

var _ store.BatchStore = (*DB)(nil)

// PutBatchRun implements store.BatchStore.
func (s *DB) PutBatchRun(ctx context.Context, r store.BatchRun) error {
	if r.Spec == nil {
		r.Spec = []byte{}
	}
	return s.inTx(ctx, "put batch run", func(tx *tx) error {
		_, err := tx.exec(ctx, `INSERT INTO batch_runs (tenant_id, run_id, state, reason, games, done, cpu_ns, created_at, ended_at, expires_at, spec)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, run_id) DO UPDATE SET state = excluded.state,
			reason = excluded.reason, games = excluded.games, done = excluded.done, cpu_ns = excluded.cpu_ns,
			ended_at = excluded.ended_at, expires_at = excluded.expires_at, spec = excluded.spec`,
			r.TenantID, r.RunID, r.State, r.Reason, r.Games, r.Done, r.CPUNanos, ToDB(r.CreatedAt), nullTime(r.EndedAt), ToDB(r.ExpiresAt), r.Spec)
		return err
	})
}

// BatchRun implements store.BatchStore.
func (s *DB) BatchRun(ctx context.Context, tenantID, runID string) (store.BatchRun, error) {
	var r store.BatchRun
	var created, expires int64
	var ended = nullTime(time.Time{})
	err := s.row(ctx, `SELECT tenant_id, run_id, state, reason, games, done, cpu_ns, created_at, ended_at, expires_at, spec
		FROM batch_runs WHERE tenant_id = ? AND run_id = ?`, tenantID, runID).
		Scan(&r.TenantID, &r.RunID, &r.State, &r.Reason, &r.Games, &r.Done, &r.CPUNanos, &created, &ended, &expires, &r.Spec)
	if err != nil {
		return store.BatchRun{}, s.wrap("batch run", err)
	}
	r.CreatedAt, r.EndedAt, r.ExpiresAt = FromDB(created), fromNullTime(ended), FromDB(expires)
	return r, nil
}

// PutBatchResult implements store.BatchStore.
func (s *DB) PutBatchResult(ctx context.Context, r store.BatchResult, maxRunBytes int64) (bool, error) {
	if r.Result == nil {
		r.Result = []byte{}
	}
	if r.Log == nil {
		r.Log = []byte{}
	}
	stored := false
	err := s.inTx(ctx, "put batch result", func(tx *tx) error {
		stored = false // the function may run again (a batch re-run): its outputs afresh
		res, err := tx.exec(ctx, `INSERT INTO batch_results (tenant_id, run_id, game, map, seed, side, winner, ticks, ended, timed_out,
			cpu_ns, error, worker, stored_at, result, log) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id, run_id, game) DO NOTHING`,
			r.TenantID, r.RunID, r.Game, r.Map, int64(r.Seed), r.Side, r.Winner, r.Ticks, boolInt(r.Ended), boolInt(r.TimedOut),
			r.CPUNanos, r.Error, r.Worker, ToDB(time.Now()), r.Result, r.Log)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n != 1 {
			return err
		}
		// Counted with the row, in its transaction: a result that does not
		// fit takes its row back with it.
		size := r.Size()
		bound := maxRunBytes
		if bound <= 0 {
			bound = 1<<63 - 1 - size
		}
		res, err = tx.exec(ctx, `UPDATE batch_runs SET stored_bytes = stored_bytes + ? WHERE tenant_id = ? AND run_id = ? AND stored_bytes <= ?`,
			size, r.TenantID, r.RunID, bound-size)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if n != 1 {
			return store.ErrRunFull
		}
		stored = true
		return nil
	})
	return stored, err
}

// BatchResults implements store.BatchStore. Rows are read one at a time and
// the page stops at its bounds, so a page of large results reads at most one
// result past them.
func (s *DB) BatchResults(ctx context.Context, tenantID, runID string, q store.BatchResultQuery) ([]store.BatchResult, bool, error) {
	if q.Limit < 1 || q.Limit > store.MaxBatchResultPage {
		return nil, false, fmt.Errorf("%w: a page of batch results holds 1..%d results, not %d", store.ErrInvalid, store.MaxBatchResultPage, q.Limit)
	}
	logCol := `x''`
	if s.d.Dollar {
		logCol = `''::bytea`
	}
	if q.WithLogs {
		logCol = `log`
	}
	// length(log) reads the log's size without its bytes (SQLite keeps it
	// in the record header; PostgreSQL reads it from the toast pointer).
	rows, err := s.rows(ctx, `SELECT tenant_id, run_id, game, map, seed, side, winner, ticks, ended, timed_out, cpu_ns, error, worker,
		stored_at, result, `+logCol+`, length(log)
		FROM batch_results WHERE tenant_id = ? AND run_id = ? AND stored_at >= ? AND game >= ? ORDER BY game LIMIT ?`,
		tenantID, runID, ToDB(q.Since), q.FromGame, q.Limit+1)
	if err != nil {
		return nil, false, s.wrap("batch results", err)
	}
	defer rows.Close()
	var page []store.BatchResult
	bytes := 0
	for rows.Next() {
		if len(page) == q.Limit {
			return page, true, nil
		}
		var b store.BatchResult
		var seed, at int64
		var ended, timedOut int
		if err := rows.Scan(&b.TenantID, &b.RunID, &b.Game, &b.Map, &seed, &b.Side, &b.Winner, &b.Ticks, &ended, &timedOut,
			&b.CPUNanos, &b.Error, &b.Worker, &at, &b.Result, &b.Log, &b.LogBytes); err != nil {
			return nil, false, s.wrap("batch results", err)
		}
		b.Seed, b.Ended, b.TimedOut, b.StoredAt = uint64(seed), ended != 0, timedOut != 0, FromDB(at)
		size := len(b.Result) + len(b.Log)
		if q.MaxBytes > 0 && len(page) > 0 && bytes+size > q.MaxBytes {
			return page, true, nil
		}
		bytes += size
		page = append(page, b)
	}
	return page, false, s.wrap("batch results", rows.Err())
}

// BatchSettings implements store.BatchStore.
func (s *DB) BatchSettings(ctx context.Context, tenantID string) (store.BatchSettings, error) {
	var b store.BatchSettings
	var retention int64
	err := s.row(ctx, `SELECT link_key, retention_us, cap_cpu_ns FROM batch_settings WHERE tenant_id = ?`, tenantID).
		Scan(&b.LinkKey, &retention, &b.CapCPUNanos)
	if err != nil {
		return store.BatchSettings{}, s.wrap("batch settings", err)
	}
	b.Retention = time.Duration(retention) * time.Microsecond
	return b, nil
}

// PutBatchPolicy implements store.BatchStore. Each of these writes sets
// only its own columns in one statement, so a policy change and a key
// rotation at once cannot undo each other (a read-modify-write of the whole
// row could put a revoked key back).
func (s *DB) PutBatchPolicy(ctx context.Context, tenantID string, retention time.Duration, capCPUNanos int64) error {
	return s.inTx(ctx, "put batch policy", func(tx *tx) error {
		_, err := tx.exec(ctx, `INSERT INTO batch_settings (tenant_id, retention_us, cap_cpu_ns, link_key) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant_id) DO UPDATE SET retention_us = excluded.retention_us, cap_cpu_ns = excluded.cap_cpu_ns`,
			tenantID, retention.Microseconds(), capCPUNanos, []byte{})
		return err
	})
}

// PutBatchLinkKey implements store.BatchStore.
func (s *DB) PutBatchLinkKey(ctx context.Context, tenantID string, key []byte, ifNone bool) ([]byte, error) {
	keep := 0
	if ifNone {
		keep = 1
	}
	var out []byte
	err := s.inTx(ctx, "put batch link key", func(tx *tx) error {
		return tx.row(ctx, `INSERT INTO batch_settings (tenant_id, retention_us, cap_cpu_ns, link_key) VALUES (?, 0, 0, ?)
			ON CONFLICT (tenant_id) DO UPDATE SET link_key = CASE WHEN ? = 1 AND length(batch_settings.link_key) > 0
				THEN batch_settings.link_key ELSE excluded.link_key END
			RETURNING link_key`, tenantID, key, keep).Scan(&out)
	})
	return out, err
}

// DeleteExpiredBatchRuns implements store.BatchStore.
func (s *DB) DeleteExpiredBatchRuns(ctx context.Context, now time.Time, limit int) (int, error) {
	type key struct{ t, r string }
	keys, err := list(ctx, s, "expired batch runs", func(r scanner) (key, error) {
		var k key
		return k, r.Scan(&k.t, &k.r)
	}, `SELECT tenant_id, run_id FROM batch_runs WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`, ToDB(now), limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		err := s.inTx(ctx, "delete batch run", func(tx *tx) error {
			if _, err := tx.exec(ctx, `DELETE FROM batch_results WHERE tenant_id = ? AND run_id = ?`, k.t, k.r); err != nil {
				return err
			}
			_, err := tx.exec(ctx, `DELETE FROM batch_runs WHERE tenant_id = ? AND run_id = ? AND expires_at <= ?`, k.t, k.r, ToDB(now))
			return err
		})
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
