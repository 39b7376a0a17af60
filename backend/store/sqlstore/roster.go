package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Match rosters: the accounts a match's reports may credit (the backend
// checks a report against them before applying it).

// AddMatchPlayers implements store.Store. Three statements whatever the
// number of accounts: the match, the accounts, one multi-row insert.
func (s *DB) AddMatchPlayers(ctx context.Context, tenantID, matchID string, accountIDs []string, at time.Time) error {
	ids := slices.Clone(accountIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	return s.inTx(ctx, "add match players", func(tx *tx) error {
		var ended sql.NullInt64
		if err := tx.row(ctx, `SELECT ended_at FROM matches WHERE tenant_id = ? AND id = ?`, tenantID, matchID).Scan(&ended); err != nil {
			return err // sql.ErrNoRows: ErrNotFound
		}
		if ended.Valid {
			return store.ErrMatchEnded
		}
		if len(ids) == 0 {
			return nil
		}
		for i := 0; i < len(ids); i += rowsPerStmt {
			chunk := ids[i:min(i+rowsPerStmt, len(ids))]
			args := []any{tenantID}
			for _, id := range chunk {
				args = append(args, id)
			}
			var n int
			if err := tx.row(ctx, `SELECT COUNT(*) FROM accounts WHERE tenant_id = ? AND id IN (`+
				strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")+`)`, args...).Scan(&n); err != nil {
				return err
			}
			if n != len(chunk) {
				return store.ErrNotFound
			}
		}
		args := make([]any, 0, 4*len(ids))
		for _, id := range ids {
			args = append(args, tenantID, matchID, id, ToDB(at))
		}
		return execRows(ctx, tx, `INSERT INTO match_roster (tenant_id, match_id, account_id, added_at)`,
			`ON CONFLICT (tenant_id, match_id, account_id) DO NOTHING`, 4, args, nil)
	})
}

// MatchRoster implements store.Store.
func (s *DB) MatchRoster(ctx context.Context, tenantID, matchID string) ([]string, error) {
	return list(ctx, s, "match roster", func(r scanner) (string, error) {
		var id string
		err := r.Scan(&id)
		return id, err
	}, `SELECT account_id FROM match_roster WHERE tenant_id = ? AND match_id = ? ORDER BY account_id`, tenantID, matchID)
}
