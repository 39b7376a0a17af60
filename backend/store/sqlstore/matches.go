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
// parameters: at most 13 per row, well under SQLite's and PostgreSQL's limits).
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

// ApplyMatchReport implements store.Store. With Dialect.WritableCTEs a
// report is two statements (applyReportCTE, matches_cte.go); otherwise one
// statement per table (applyReport).
func (s *DB) ApplyMatchReport(ctx context.Context, r store.MatchReport) (bool, error) {
	var applied bool
	var skipped []store.SkippedGrant
	cte := s.d.WritableCTEs && len(r.Players) <= rowsPerStmt
	var steps twoStep
	if cte && maxReportParams(r) <= maxStmtParams {
		// With Dialect.Pipeline the group commit may send its statements
		// with other reports' (commit.go).
		steps = newReportSteps(r, &applied, &skipped)
	}
	err := s.inTxSteps(ctx, "apply match report", func(tx *tx) error {
		var err error
		skipped = nil
		if cte {
			applied, err = applyReportCTE(ctx, tx, r, &skipped)
		} else {
			applied, err = applyReport(ctx, tx, r, &skipped)
		}
		return err
	}, steps)
	if err == nil && r.Skipped != nil {
		*r.Skipped = skipped
	}
	return applied, err
}

// applyReport applies r in tx, a statement per table. skipped gets the
// grants left out for the caps.
func applyReport(ctx context.Context, tx *tx, r store.MatchReport, skipped *[]store.SkippedGrant) (bool, error) {
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
		return false, claimMissed(ctx, tx, r)
	} else if err != nil {
		return false, err
	}
	// Rows no other match touches first: the rows that reports of
	// other matches share (an account's progression, wallet, boards,
	// ratings) stay locked, until the commit, for as short as can be.
	if r.Final && r.Webhook != nil {
		if err := insertDelivery(ctx, tx, *r.Webhook); err != nil {
			return false, err
		}
	}
	if err := applyPlayers(ctx, tx, r, game, skipped); err != nil {
		return false, err
	}
	return true, nil
}

// claimMissed is the outcome of a report whose claim updated no match row:
// the match does not exist, or ended (an interim report is then refused),
// or the report is a duplicate or stale (nothing to do).
func claimMissed(ctx context.Context, tx *tx, r store.MatchReport) error {
	m, err := scanMatch(tx.row(ctx, `SELECT `+matchCols+` FROM matches WHERE tenant_id = ? AND id = ?`, r.TenantID, r.MatchID))
	if err != nil {
		return err
	}
	return claimOutcome(m, r)
}

// ErrReportRaced: a match report's claim missed because another report of
// the match committed after the claiming statement's snapshot was taken
// (applyReportCTE). Nothing was written; run it again (Dialect.Retry).
var ErrReportRaced = errors.New("match report raced another report of the match: nothing applied, to be run again")

// claimOutcome says why r's claim of m (read afresh after it missed)
// missed: a final already ended is a repeat (nil: nothing to do), as is an
// interim report at or below the match's last seq; an interim of an ended
// match is ErrMatchEnded. A match still open that r should have claimed
// (a final, or an interim above its last seq) missed because another report
// changed it meanwhile: ErrReportRaced.
func claimOutcome(m store.Match, r store.MatchReport) error {
	switch {
	case !m.EndedAt.IsZero() && !r.Final:
		return store.ErrMatchEnded
	case m.EndedAt.IsZero() && (r.Final || m.LastSeq < r.Seq):
		return ErrReportRaced
	}
	return nil
}

// sortedPlayers returns r's players by account id: rows are locked in that
// order, which avoids deadlocks between transactions.
func sortedPlayers(r store.MatchReport) []store.PlayerReport {
	players := slices.Clone(r.Players)
	slices.SortFunc(players, func(a, b store.PlayerReport) int { return strings.Compare(a.AccountID, b.AccountID) })
	return players
}

// reportKey is the change key of r's grants.
func reportKey(r store.MatchReport) string {
	if r.Final {
		return "match/" + r.MatchID + "/final"
	}
	return fmt.Sprintf("match/%s/%d", r.MatchID, r.Seq)
}

// scanPrev decodes what the match granted a player before.
func scanPrev(xp sql.NullInt64, cur, items sql.NullString) (*playerState, error) {
	st := &playerState{xp: xp.Int64}
	var err error
	if st.currency, err = decodeMap(cur.String); err == nil {
		st.items, err = decodeMap(items.String)
	}
	return st, err
}

// reportPlan is what a claimed report writes: rows for each table, as the
// arguments of multi-row statements.
type reportPlan struct {
	key, reason string
	at          int64
	// matchPlayers: 13 columns; xp (progression): 3; cur (wallet) and
	// items (inventory): 4; boards (leaderboard): 6.
	matchPlayers, xp, cur, items, boards []any
	// rated are the players whose ratings the report updates (sorted).
	rated []string
	// skipped are the grants left out for the caps (caps.go).
	skipped []store.SkippedGrant
}

// reportCandidates returns the keys r would grant its players that may be
// new to them (what the caps check): each currency and item a fresh player
// gets more of than the match granted before, by account, then name.
func reportCandidates(players []store.PlayerReport, prev map[string]*playerState, fresh map[string]bool) (cands [2][]keyRef, any bool) {
	for _, pl := range players {
		old := prev[pl.AccountID]
		if old == nil || !fresh[pl.AccountID] {
			continue
		}
		for k, m := range [2]map[string]int64{pl.Currency, pl.Items} {
			before := old.currency
			if k == capItem {
				before = old.items
			}
			for _, name := range sortedKeys(m) {
				if m[name] > before[name] {
					cands[k] = append(cands[k], keyRef{pl.AccountID, name})
					any = true
				}
			}
		}
	}
	return cands, any
}

// leaveOut removes from d (a player's grants of kind k) the keys the caps
// leave out, puts back their totals in total (what the match granted:
// old, as if the report had not named them) and returns them.
func (h *holdings) leaveOut(k int, account string, d, total, old map[string]int64) []store.SkippedGrant {
	if h == nil || len(d) == 0 {
		return nil
	}
	_, skip := h.fits(k, account, sortedKeys(d))
	var out []store.SkippedGrant
	for _, name := range skip {
		out = append(out, store.SkippedGrant{AccountID: account, Kind: capKinds[k].kind, Name: name, Amount: d[name]})
		delete(d, name)
		if v, ok := old[name]; ok {
			total[name] = v
		} else {
			delete(total, name)
		}
	}
	return out
}

// planReport computes r's writes from what the match granted each player
// before (prev: the players whose account exists), which players' change
// key is fresh (not used before: only those are granted anything) and what
// they hold of the keys the report would grant them (caps: nil if none of
// those may be new).
func planReport(r store.MatchReport, game string, players []store.PlayerReport, prev map[string]*playerState, fresh map[string]bool, caps *holdings) reportPlan {
	p := reportPlan{key: reportKey(r), reason: "match " + r.MatchID, at: ToDB(r.At)}
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
	for _, pl := range players {
		old := prev[pl.AccountID]
		if old == nil {
			continue
		}
		newXP := max(old.xp, pl.XP)
		dCur, dItems := map[string]int64{}, map[string]int64{}
		newCur := diff(old.currency, pl.Currency, dCur)
		newItems := diff(old.items, pl.Items, dItems)
		if fresh[pl.AccountID] {
			p.skipped = append(p.skipped, caps.leaveOut(capCurrency, pl.AccountID, dCur, newCur, old.currency)...)
			p.skipped = append(p.skipped, caps.leaveOut(capItem, pl.AccountID, dItems, newItems, old.items)...)
			if d := newXP - old.xp; d != 0 {
				p.xp = append(p.xp, r.TenantID, pl.AccountID, d)
			}
			for _, c := range sortedKeys(dCur) {
				p.cur = append(p.cur, r.TenantID, pl.AccountID, c, dCur[c])
			}
			for _, it := range sortedKeys(dItems) {
				p.items = append(p.items, r.TenantID, pl.AccountID, it, dItems[it])
			}
		}
		p.matchPlayers = append(p.matchPlayers, r.TenantID, r.MatchID, pl.AccountID, pl.Score, pl.DurationMs, pl.Damage, encodeMap(pl.ItemsUsed),
			newXP, encodeMap(newCur), encodeMap(newItems), encodeMap(pl.Stats), pl.Place, pl.Team)
		if r.Final {
			p.boards = append(p.boards, r.TenantID, game, pl.AccountID, pl.Score, pl.Score, 1)
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
			p.boards = append(p.boards, r.TenantID, b.Board, b.AccountID, b.Value, b.Value, 1)
		}
		if r.Rating != nil {
			for _, pl := range players {
				if prev[pl.AccountID] != nil {
					p.rated = append(p.rated, pl.AccountID)
				}
			}
		}
	}
	return p
}

// The upserts of a report's rows, shared by both ways of applying it.
const (
	matchPlayersInsert = `INSERT INTO match_players (tenant_id, match_id, account_id, score, duration_ms, damage, items_used, xp, currency, items, stats, place, team)`
	matchPlayersUpsert = `ON CONFLICT (tenant_id, match_id, account_id) DO UPDATE SET
		score = excluded.score, duration_ms = excluded.duration_ms, damage = excluded.damage, items_used = excluded.items_used,
		xp = excluded.xp, currency = excluded.currency, items = excluded.items, stats = excluded.stats,
		place = excluded.place, team = excluded.team`
	progressionInsert = `INSERT INTO progression (tenant_id, account_id, xp)`
	progressionUpsert = `ON CONFLICT (tenant_id, account_id) DO UPDATE SET xp = progression.xp + excluded.xp`
	walletInsert      = `INSERT INTO wallet (tenant_id, account_id, currency, balance)`
	walletUpsert      = `ON CONFLICT (tenant_id, account_id, currency) DO UPDATE SET balance = wallet.balance + excluded.balance
		RETURNING account_id, currency, balance`
	ledgerInsert    = `INSERT INTO ledger (tenant_id, account_id, currency, delta, balance, key, reason, at)`
	inventoryInsert = `INSERT INTO inventory (tenant_id, account_id, item, quantity)`
	inventoryUpsert = `ON CONFLICT (tenant_id, account_id, item) DO UPDATE SET quantity = inventory.quantity + excluded.quantity`
	boardsInsert    = `INSERT INTO leaderboard (tenant_id, game, account_id, best, total, matches)`
	boardsUpsert    = `ON CONFLICT (tenant_id, game, account_id) DO UPDATE SET
		best = CASE WHEN leaderboard.best > excluded.best THEN leaderboard.best ELSE excluded.best END,
		total = leaderboard.total + excluded.total, matches = leaderboard.matches + 1`
	ratingsInsert = `INSERT INTO ratings (tenant_id, mode, account_id, rating, rd, volatility, matches, updated_at)`
	// ratingsLock changes nothing but locks the row (PostgreSQL: concurrent
	// results of matches sharing a player rate one after the other, each
	// from the other's outcome) and returns its values.
	ratingsLock  = `ON CONFLICT (tenant_id, mode, account_id) DO UPDATE SET matches = ratings.matches RETURNING ` + ratingCols
	ratingsWrite = `ON CONFLICT (tenant_id, mode, account_id) DO UPDATE SET rating = excluded.rating, rd = excluded.rd,
		volatility = excluded.volatility, matches = excluded.matches, updated_at = excluded.updated_at`
)

// applyPlayers grants each player of r the difference between the report's
// totals and what the match granted so far, records the new totals and, for
// a final report, feeds the leaderboard. Players whose account is not in the
// tenant (or was deleted) get nothing; keys the caps leave out go to skipped.
func applyPlayers(ctx context.Context, tx *tx, r store.MatchReport, game string, skipped *[]store.SkippedGrant) error {
	players := sortedPlayers(r)
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
			WHERE a.tenant_id = ? AND a.id IN (`+placeholders(len(chunk))+`)`, args...)
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
			if prev[id], err = scanPrev(xp, cur, items); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	key := reportKey(r)
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

	var caps *holdings
	if cands, any := reportCandidates(players, prev, fresh); any {
		var err error
		if caps, err = readHoldings(ctx, tx, r.TenantID, cands); err != nil {
			return err
		}
	}
	p := planReport(r, game, players, prev, fresh, caps)
	if skipped != nil {
		*skipped = p.skipped
	}
	if err := writePlan(ctx, tx, r, p); err != nil {
		return err
	}
	if len(p.rated) > 0 {
		return rateMatch(ctx, tx, r.TenantID, r.Rating, p.rated, at)
	}
	return nil
}

// writePlan writes a report's rows but the ratings, a multi-row statement
// per table.
func writePlan(ctx context.Context, tx *tx, r store.MatchReport, p reportPlan) error {
	if err := execRows(ctx, tx, matchPlayersInsert, matchPlayersUpsert, 13, p.matchPlayers, nil); err != nil {
		return err
	}
	if len(p.xp) > 0 {
		if err := execRows(ctx, tx, progressionInsert, progressionUpsert, 3, p.xp, nil); err != nil {
			return err
		}
	}
	if len(p.cur) > 0 {
		// Balances after the grant, for the ledger.
		type acct struct{ account, currency string }
		bal := map[acct]int64{}
		if err := execRows(ctx, tx, walletInsert, walletUpsert, 4, p.cur, func(row scanner) error {
			var k acct
			var b int64
			err := row.Scan(&k.account, &k.currency, &b)
			bal[k] = b
			return err
		}); err != nil {
			return err
		}
		var ledger []any
		for i := 0; i < len(p.cur); i += 4 {
			acc, cur, d := p.cur[i+1].(string), p.cur[i+2].(string), p.cur[i+3].(int64)
			ledger = append(ledger, r.TenantID, acc, cur, d, bal[acct{acc, cur}], p.key, p.reason, p.at)
		}
		if err := execRows(ctx, tx, ledgerInsert, ``, 8, ledger, nil); err != nil {
			return err
		}
	}
	if len(p.items) > 0 {
		if err := execRows(ctx, tx, inventoryInsert, inventoryUpsert, 4, p.items, nil); err != nil {
			return err
		}
	}
	if len(p.boards) > 0 {
		if err := execRows(ctx, tx, boardsInsert, boardsUpsert, 6, p.boards, nil); err != nil {
			return err
		}
	}
	return nil
}
