package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"ludus.dev/ludus/backend/store"
)

// A match report in two statements (Dialect.WritableCTEs, PostgreSQL).
//
// applyReport takes a round trip per table: about ten for a rated final
// result. On PostgreSQL each is a wakeup of the server process and of ours,
// and in a group commit the reports of a batch run one after the other on
// one connection, so round trips, not the work, bound the reports per
// second. With INSERT and UPDATE in WITH clauses a report is two
// statements: the first claims the match and returns what the second
// needs (what the match granted each player before, whose change key is
// fresh, the rating rows it locks); the second writes every table. The rows,
// the order of locks within each table and the outcome are applyReport's
// (the store conformance tests run both).

// maxStmtParams bounds the parameters of the statement that writes a
// report (PostgreSQL takes at most 65,535).
const maxStmtParams = 30000

// applyReportCTE applies r in tx in two statements; r has at most
// rowsPerStmt players.
func applyReportCTE(ctx context.Context, tx *tx, r store.MatchReport) (bool, error) {
	players := sortedPlayers(r)
	ids := make([]string, 0, len(players))
	for _, p := range players {
		ids = append(ids, p.AccountID)
	}
	ids = slices.Compact(ids)
	key := reportKey(r)
	at := ToDB(r.At)
	var q strings.Builder
	var args []any
	// The claim, as applyReport's.
	if r.Final {
		q.WriteString(`WITH c AS (UPDATE matches SET ended_at = ?, last_seq = CASE WHEN last_seq > ? THEN last_seq ELSE ? END
			WHERE tenant_id = ? AND id = ? AND ended_at IS NULL RETURNING game)`)
		args = append(args, at, r.Seq, r.Seq, r.TenantID, r.MatchID)
	} else {
		q.WriteString(`WITH c AS (UPDATE matches SET last_seq = ? WHERE tenant_id = ? AND id = ? AND ended_at IS NULL AND last_seq < ?
			RETURNING game)`)
		args = append(args, r.Seq, r.TenantID, r.MatchID, r.Seq)
	}
	// Every part below happens only if the claim did: it reads c.
	if r.Final && r.Webhook != nil {
		d := *r.Webhook
		if d.State == "" {
			d.State = store.DeliveryPending
		}
		q.WriteString(`, wh AS (INSERT INTO webhook_deliveries (` + deliveryCols + `)
			SELECT ?, ?, ?, ?::bytea, ?, ?::bigint, ?::bigint, ?, ?::bigint, ?::bigint FROM c)`)
		args = append(args, d.ID, d.TenantID, d.Event, d.Payload, d.State, d.Attempts, ToDB(d.NextAt), d.LastError,
			ToDB(d.CreatedAt), ToDB(d.UpdatedAt))
	}
	rated := r.Final && r.Rating != nil
	if len(players) > 0 {
		// The players whose account exists, what the match granted them
		// before, their change keys (fresh: returned) and, for a rated
		// result, their rating rows, locked.
		// (LATERAL ... LIMIT 1: index lookups whatever the plan, as in
		// sessionsIn.)
		q.WriteString(`, acc AS (SELECT x.id, mp.xp, mp.currency, mp.items FROM (VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?), ", len(ids)), ", ") + `) p (id)
			CROSS JOIN LATERAL (SELECT id FROM accounts WHERE tenant_id = ? AND id = p.id LIMIT 1) x
			LEFT JOIN LATERAL (SELECT xp, currency, items FROM match_players
				WHERE tenant_id = ? AND match_id = ? AND account_id = x.id LIMIT 1) mp ON true
			WHERE EXISTS (SELECT 1 FROM c))
			, ch AS (INSERT INTO changes_applied (tenant_id, account_id, key, at) SELECT ?, id, ?, ?::bigint FROM acc ORDER BY id
			ON CONFLICT (tenant_id, account_id, key) DO NOTHING RETURNING account_id)`)
		for _, id := range ids {
			args = append(args, id)
		}
		args = append(args, r.TenantID, r.TenantID, r.MatchID, r.TenantID, key, at)
		if rated {
			q.WriteString(`, rt AS (` + ratingsInsert + ` SELECT ?, ?, id, 0, 0, 0, 0, 0 FROM acc ORDER BY id ` + ratingsLock + `)`)
			args = append(args, r.TenantID, r.Rating.Mode)
		}
	}
	q.WriteString(` SELECT 'c', game, NULL::bigint, NULL::text, NULL::text, NULL::float8, NULL::float8, NULL::float8, NULL::bigint, NULL::bigint FROM c`)
	if len(players) > 0 {
		q.WriteString(` UNION ALL SELECT 'a', id, xp, currency, items, NULL, NULL, NULL, NULL, NULL FROM acc
			UNION ALL SELECT 'f', account_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM ch`)
		if rated {
			q.WriteString(` UNION ALL SELECT 'r', account_id, NULL, NULL, NULL, rating, rd, volatility, matches, updated_at FROM rt`)
		}
	}
	claimed := false
	var game string
	prev := map[string]*playerState{}
	fresh := map[string]bool{}
	locked := map[string]store.Rating{}
	rows, err := tx.query(ctx, q.String(), args...)
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var kind, id string
		var xp, matches, updated sql.NullInt64
		var cur, items sql.NullString
		var rating, rd, vol sql.NullFloat64
		if err := rows.Scan(&kind, &id, &xp, &cur, &items, &rating, &rd, &vol, &matches, &updated); err != nil {
			rows.Close()
			return false, err
		}
		switch kind {
		case "c":
			claimed, game = true, id
		case "a":
			if prev[id], err = scanPrev(xp, cur, items); err != nil {
				rows.Close()
				return false, err
			}
		case "f":
			fresh[id] = true
		case "r":
			x := store.Rating{AccountID: id, Rating: rating.Float64, RD: rd.Float64, Volatility: vol.Float64, Matches: matches.Int64}
			if updated.Int64 != 0 {
				x.UpdatedAt = FromDB(updated.Int64)
			}
			locked[id] = x
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if !claimed {
		return false, claimMissed(ctx, tx, r)
	}
	if len(prev) == 0 {
		return true, nil
	}

	// Every write, in one statement, unless it would take too many
	// parameters (a big match with many stats): then a statement per table.
	p := planReport(r, game, players, prev, fresh)
	var rrows []any
	if len(p.rated) > 0 {
		var err error
		if rrows, err = rateRows(r.TenantID, r.Rating, p.rated, locked, p.at); err != nil {
			return false, err
		}
	}
	if n := len(p.matchPlayers) + len(p.xp) + 2*len(p.cur) + len(p.items) + len(p.boards) + len(rrows); n > maxStmtParams {
		if err := writePlan(ctx, tx, r, p); err != nil {
			return false, err
		}
		return true, execRows(ctx, tx, ratingsInsert, ratingsWrite, 8, rrows, nil)
	}
	var w strings.Builder
	var wargs []any
	sep := "WITH "
	add := func(name, insert string, cols int, rows []any, upsert string) {
		w.WriteString(sep + name + ` AS (` + insert + ` VALUES ` + values(len(rows)/cols, cols) + ` ` + upsert + `)`)
		sep = ", "
		wargs = append(wargs, rows...)
	}
	add("mp", matchPlayersInsert, 13, p.matchPlayers, matchPlayersUpsert)
	if len(p.xp) > 0 {
		add("pr", progressionInsert, 3, p.xp, progressionUpsert)
	}
	if len(p.cur) > 0 {
		add("w", walletInsert, 4, p.cur, walletUpsert)
		// The ledger, in the order of the grants, with the balances the
		// wallet upsert returns.
		n := len(p.cur) / 4
		w.WriteString(`, lg AS (` + ledgerInsert + ` SELECT ?, d.acc, d.cur, d.delta, w.balance, ?, ?, ?::bigint FROM (VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?::bigint, ?, ?, ?::bigint), `, n), ", ") +
			`) d(o, acc, cur, delta) JOIN w ON w.account_id = d.acc AND w.currency = d.cur ORDER BY d.o)`)
		wargs = append(wargs, r.TenantID, p.key, p.reason, p.at)
		for i := 0; i < len(p.cur); i += 4 {
			wargs = append(wargs, i/4, p.cur[i+1], p.cur[i+2], p.cur[i+3])
		}
	}
	if len(p.items) > 0 {
		add("inv", inventoryInsert, 4, p.items, inventoryUpsert)
	}
	if len(p.boards) > 0 {
		add("lb", boardsInsert, 6, p.boards, boardsUpsert)
	}
	if len(rrows) > 0 {
		add("rw", ratingsInsert, 8, rrows, ratingsWrite)
	}
	w.WriteString(` SELECT 1`)
	if _, err := tx.exec(ctx, w.String(), wargs...); err != nil {
		return false, err
	}
	return true, nil
}
