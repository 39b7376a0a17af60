package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"ludus.dev/ludus/backend/store"
)

// Match reports are applied in one transaction with a fixed number of
// statements whatever the number of players: each table gets one multi-row
// statement (in chunks of rowsPerStmt rows), not one per player.

// rowsPerStmt bounds the rows of one multi-row statement (and so its
// parameters: at most 9 per row, well under SQLite's and PostgreSQL's limits).
const rowsPerStmt = 100

// values returns "(?, ?), (?, ?)" for rows rows of cols columns.
func values(rows, cols int) string {
	row := "(" + strings.Repeat("?, ", cols-1) + "?)"
	return strings.Repeat(row+", ", rows-1) + row
}

// execRows runs prefix + VALUES of rows + suffix in chunks; each row is cols
// arguments. scan, if set, gets each returned row (for RETURNING).
func execRows(ctx context.Context, tx *tx, prefix, suffix string, cols int, args []any, scan func(scanner) error) error {
	n := len(args) / cols
	for i := 0; i < n; i += rowsPerStmt {
		k := min(rowsPerStmt, n-i)
		q := prefix + " VALUES " + values(k, cols) + " " + suffix
		chunk := args[i*cols : (i+k)*cols]
		if scan == nil {
			if _, err := tx.exec(ctx, q, chunk...); err != nil {
				return err
			}
			continue
		}
		rows, err := tx.query(ctx, q, chunk...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// playerState is what a match granted a player so far.
type playerState struct {
	xp              int64
	currency, items map[string]int64
}

// ApplyMatchReport implements store.Store.
func (s *DB) ApplyMatchReport(ctx context.Context, r store.MatchReport) (bool, error) {
	var applied bool
	err := s.inTx(ctx, "apply match report", func(tx *tx) error {
		applied = false
		// Claim the report on the match row: the UPDATE locks the row, so
		// reports of one match apply one at a time, and a duplicate or stale
		// report changes nothing.
		var game string
		var err error
		if r.Final {
			err = tx.row(ctx, `UPDATE matches SET ended_at = ?, last_seq = CASE WHEN last_seq > ? THEN last_seq ELSE ? END
				WHERE tenant_id = ? AND id = ? AND ended_at IS NULL RETURNING game`, ToDB(r.At), r.Seq, r.Seq, r.TenantID, r.MatchID).Scan(&game)
		} else {
			err = tx.row(ctx, `UPDATE matches SET last_seq = ? WHERE tenant_id = ? AND id = ? AND ended_at IS NULL AND last_seq < ? RETURNING game`,
				r.Seq, r.TenantID, r.MatchID, r.Seq).Scan(&game)
		}
		if errors.Is(err, sql.ErrNoRows) {
			m, err := scanMatch(tx.row(ctx, `SELECT `+matchCols+` FROM matches WHERE tenant_id = ? AND id = ?`, r.TenantID, r.MatchID))
			if err != nil {
				return err
			}
			if !m.EndedAt.IsZero() && !r.Final {
				return store.ErrMatchEnded
			}
			return nil // duplicate final, or a stale interim report
		} else if err != nil {
			return err
		}
		// Rows no other match touches first: the rows that reports of
		// other matches share (an account's progression, wallet, boards,
		// ratings) stay locked, until the commit, for as short as can be.
		if r.Final && r.Webhook != nil {
			if err := insertDelivery(ctx, tx, *r.Webhook); err != nil {
				return err
			}
		}
		if err := applyPlayers(ctx, tx, r, game); err != nil {
			return err
		}
		applied = true
		return nil
	})
	return applied, err
}

// applyPlayers grants each player of r the difference between the report's
// totals and what the match granted so far, records the new totals and, for
// a final report, feeds the leaderboard. Players whose account is not in the
// tenant (or was deleted) get nothing.
func applyPlayers(ctx context.Context, tx *tx, r store.MatchReport, game string) error {
	players := slices.Clone(r.Players)
	slices.SortFunc(players, func(a, b store.PlayerReport) int { return strings.Compare(a.AccountID, b.AccountID) })
	if len(players) == 0 {
		return nil
	}
	// Which accounts exist, and what the match granted them before.
	prev := map[string]*playerState{}
	for i := 0; i < len(players); i += rowsPerStmt {
		chunk := players[i:min(i+rowsPerStmt, len(players))]
		args := []any{r.MatchID, r.TenantID}
		for _, p := range chunk {
			args = append(args, p.AccountID)
		}
		rows, err := tx.query(ctx, `SELECT a.id, mp.xp, mp.currency, mp.items FROM accounts a
			LEFT JOIN match_players mp ON mp.tenant_id = a.tenant_id AND mp.match_id = ? AND mp.account_id = a.id
			WHERE a.tenant_id = ? AND a.id IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var xp sql.NullInt64
			var cur, items sql.NullString
			if err := rows.Scan(&id, &xp, &cur, &items); err != nil {
				rows.Close()
				return err
			}
			st := &playerState{xp: xp.Int64}
			if st.currency, err = decodeMap(cur.String); err == nil {
				st.items, err = decodeMap(items.String)
			}
			if err != nil {
				rows.Close()
				return err
			}
			prev[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	key := fmt.Sprintf("match/%s/%d", r.MatchID, r.Seq)
	if r.Final {
		key = "match/" + r.MatchID + "/final"
	}
	reason := "match " + r.MatchID
	at := ToDB(r.At)

	// The change keys: a player whose key was used before (e.g. by an
	// admin grant with the same key) is granted nothing, as ApplyChange.
	var args []any
	for _, p := range players {
		if prev[p.AccountID] != nil {
			args = append(args, r.TenantID, p.AccountID, key, at)
		}
	}
	if len(args) == 0 {
		return nil
	}
	fresh := map[string]bool{}
	if err := execRows(ctx, tx, `INSERT INTO changes_applied (tenant_id, account_id, key, at)`,
		`ON CONFLICT (tenant_id, account_id, key) DO NOTHING RETURNING account_id`, 4, args, func(row scanner) error {
			var id string
			err := row.Scan(&id)
			fresh[id] = true
			return err
		}); err != nil {
		return err
	}

	diff := func(old, cur, into map[string]int64) map[string]int64 {
		out := maps(old)
		for k, v := range cur {
			if v > old[k] {
				into[k] = v - old[k]
				out[k] = v
			}
		}
		return out
	}
	var xpArgs, curArgs, itemArgs, mpArgs, lbArgs []any
	for _, p := range players {
		old := prev[p.AccountID]
		if old == nil {
			continue
		}
		newXP := max(old.xp, p.XP)
		dCur, dItems := map[string]int64{}, map[string]int64{}
		newCur := diff(old.currency, p.Currency, dCur)
		newItems := diff(old.items, p.Items, dItems)
		if fresh[p.AccountID] {
			if d := newXP - old.xp; d != 0 {
				xpArgs = append(xpArgs, r.TenantID, p.AccountID, d)
			}
			for _, c := range sortedKeys(dCur) {
				curArgs = append(curArgs, r.TenantID, p.AccountID, c, dCur[c])
			}
			for _, it := range sortedKeys(dItems) {
				itemArgs = append(itemArgs, r.TenantID, p.AccountID, it, dItems[it])
			}
		}
		mpArgs = append(mpArgs, r.TenantID, r.MatchID, p.AccountID, p.Score, p.DurationMs, p.Damage, encodeMap(p.ItemsUsed),
			newXP, encodeMap(newCur), encodeMap(newItems), encodeMap(p.Stats), p.Place, p.Team)
		if r.Final {
			lbArgs = append(lbArgs, r.TenantID, game, p.AccountID, p.Score, p.Score, 1)
		}
	}
	if err := execRows(ctx, tx, `INSERT INTO match_players (tenant_id, match_id, account_id, score, duration_ms, damage, items_used, xp, currency, items, stats, place, team)`,
		`ON CONFLICT (tenant_id, match_id, account_id) DO UPDATE SET
		score = excluded.score, duration_ms = excluded.duration_ms, damage = excluded.damage, items_used = excluded.items_used,
		xp = excluded.xp, currency = excluded.currency, items = excluded.items, stats = excluded.stats,
		place = excluded.place, team = excluded.team`, 13, mpArgs, nil); err != nil {
		return err
	}
	if len(xpArgs) > 0 {
		if err := execRows(ctx, tx, `INSERT INTO progression (tenant_id, account_id, xp)`,
			`ON CONFLICT (tenant_id, account_id) DO UPDATE SET xp = progression.xp + excluded.xp`, 3, xpArgs, nil); err != nil {
			return err
		}
	}
	if len(curArgs) > 0 {
		// Balances after the grant, for the ledger.
		type acct struct{ account, currency string }
		bal := map[acct]int64{}
		if err := execRows(ctx, tx, `INSERT INTO wallet (tenant_id, account_id, currency, balance)`,
			`ON CONFLICT (tenant_id, account_id, currency) DO UPDATE SET balance = wallet.balance + excluded.balance
			RETURNING account_id, currency, balance`, 4, curArgs, func(row scanner) error {
				var k acct
				var b int64
				err := row.Scan(&k.account, &k.currency, &b)
				bal[k] = b
				return err
			}); err != nil {
			return err
		}
		var ledger []any
		for i := 0; i < len(curArgs); i += 4 {
			acc, cur, d := curArgs[i+1].(string), curArgs[i+2].(string), curArgs[i+3].(int64)
			ledger = append(ledger, r.TenantID, acc, cur, d, bal[acct{acc, cur}], key, reason, at)
		}
		if err := execRows(ctx, tx, `INSERT INTO ledger (tenant_id, account_id, currency, delta, balance, key, reason, at)`, ``, 8, ledger, nil); err != nil {
			return err
		}
	}
	if len(itemArgs) > 0 {
		if err := execRows(ctx, tx, `INSERT INTO inventory (tenant_id, account_id, item, quantity)`,
			`ON CONFLICT (tenant_id, account_id, item) DO UPDATE SET quantity = inventory.quantity + excluded.quantity`, 4, itemArgs, nil); err != nil {
			return err
		}
	}
	if r.Final {
		// Stat leaderboards: one entry per board and account (the last
		// wins if the caller named one twice).
		type bk struct{ board, account string }
		seen := map[bk]bool{}
		for i := len(r.Boards) - 1; i >= 0; i-- {
			b := r.Boards[i]
			if prev[b.AccountID] == nil || seen[bk{b.Board, b.AccountID}] {
				continue
			}
			seen[bk{b.Board, b.AccountID}] = true
			lbArgs = append(lbArgs, r.TenantID, b.Board, b.AccountID, b.Value, b.Value, 1)
		}
	}
	if len(lbArgs) > 0 {
		if err := execRows(ctx, tx, `INSERT INTO leaderboard (tenant_id, game, account_id, best, total, matches)`,
			`ON CONFLICT (tenant_id, game, account_id) DO UPDATE SET
			best = CASE WHEN leaderboard.best > excluded.best THEN leaderboard.best ELSE excluded.best END,
			total = leaderboard.total + excluded.total, matches = leaderboard.matches + 1`, 6, lbArgs, nil); err != nil {
			return err
		}
	}
	if r.Final && r.Rating != nil {
		var ids []string
		for _, p := range players {
			if prev[p.AccountID] != nil {
				ids = append(ids, p.AccountID)
			}
		}
		return rateMatch(ctx, tx, r.TenantID, r.Rating, ids, at)
	}
	return nil
}
