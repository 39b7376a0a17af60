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

// applyReportCTE applies r in tx in two statements (and, when the report
// would give a player a currency or item it does not hold, the cap check's
// between them); r has at most rowsPerStmt players. skipped gets the grants
// left out for the caps.
func applyReportCTE(ctx context.Context, tx *tx, r store.MatchReport, skipped *[]store.SkippedGrant) (bool, error) {
	x := newReportSteps(r, nil, nil)
	rows, err := tx.query(ctx, x.q1, x.args1...)
	if err != nil {
		return false, err
	}
	err = x.scanFirst(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return false, err
	}
	if !x.claimed {
		return false, claimMissed(ctx, tx, r)
	}
	if len(x.prev) == 0 {
		return true, nil
	}
	if cands, ok := x.capsFromFirst(); !ok {
		if x.caps, err = readHoldings(ctx, tx, r.TenantID, cands); err != nil {
			return false, err
		}
	}
	p, rrows, err := x.plan(nil)
	if err != nil {
		return false, err
	}
	if skipped != nil {
		*skipped = p.skipped
	}
	if reportParams(p, rrows) > maxStmtParams {
		// Every write in one statement would take too many parameters
		// (a big match with many stats): a statement per table.
		if err := writePlan(ctx, tx, r, p); err != nil {
			return false, err
		}
		return true, execRows(ctx, tx, ratingsInsert, ratingsWrite, 8, rrows, nil)
	}
	q, args := writeReport(r, p, rrows)
	if _, err := tx.exec(ctx, q, args...); err != nil {
		return false, err
	}
	return true, nil
}

// reportSteps is a match report as the first statement of applyReportCTE
// and, built from its rows, the second: what the group commit needs to
// send the statements of several reports together (twoStep, commit.go).
type reportSteps struct {
	r       store.MatchReport
	players []store.PlayerReport
	// The first statement ("?" placeholders).
	q1    string
	args1 []any
	// From its rows: the claim, what the match granted each player before,
	// whose change key is fresh, the rating rows it locked.
	claimed bool
	game    string
	prev    map[string]*playerState
	fresh   map[string]bool
	locked  map[string]store.Rating
	// missed is the outcome of a claim that missed (claimMissed).
	missed error
	// heldFirst are the currencies and items (capKinds) the report names
	// with a positive total that the players hold, as the first statement
	// read them; caps what the cap check has (capsFromFirst, readHoldings).
	heldFirst [2]map[keyRef]bool
	caps      *holdings
	// skipped are the grants the last plan left out for the caps.
	skipped []store.SkippedGrant
	// applied and skippedOut, if set, get the outcome of ApplyMatchReport.
	applied    *bool
	skippedOut *[]store.SkippedGrant
}

// errStepsUnfit: a report's second statement cannot be built from its
// first statement's rows alone (it would give a player a currency or item
// it does not hold: the caps need a lock and a count in between). The
// group commit runs the report again by its fn (applyReportCTE), which
// does that.
var errStepsUnfit = errors.New("match report: the cap check needs statements of its own")

func newReportSteps(r store.MatchReport, applied *bool, skipped *[]store.SkippedGrant) *reportSteps {
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
	// The claim, as applyReport's. "(ended_at + 0) IS NULL" is
	// "ended_at IS NULL" that no index serves: PostgreSQL keeps a prepared
	// statement's generic plan, and one made while the tables were small
	// found the match through matches_ended (tenant_id, ended_at), reading
	// the entries of every unended match of the tenant (and of those ended
	// since the last vacuum) instead of one by the primary key. Likewise
	// "account_id || ''" below keeps match_players_account (every match of
	// the player) out of the lookup of a player's row of the match.
	//
	// The claim must also find the match as the statement's snapshot has it
	// ("last_seq = (SELECT last_seq …)", a subquery evaluated once, on the
	// snapshot): the reads below (acc: what the match granted each player
	// before) see that snapshot, while an UPDATE that waited for another
	// transaction's report of the match re-checks its WHERE on the row that
	// report committed. Without the guard a report racing another on a
	// second replica read the totals from before it and granted its grants
	// again. A claim that misses so is ErrReportRaced (claimOutcome), run
	// again on a fresh snapshot.
	if r.Final {
		q.WriteString(`WITH c AS (UPDATE matches SET ended_at = ?, last_seq = CASE WHEN last_seq > ? THEN last_seq ELSE ? END
			WHERE tenant_id = ? AND id = ? AND (ended_at + 0) IS NULL
			AND last_seq = (SELECT s.last_seq FROM matches s WHERE s.tenant_id = ? AND s.id = ?) RETURNING game)`)
		args = append(args, at, r.Seq, r.Seq, r.TenantID, r.MatchID, r.TenantID, r.MatchID)
	} else {
		q.WriteString(`WITH c AS (UPDATE matches SET last_seq = ? WHERE tenant_id = ? AND id = ? AND (ended_at + 0) IS NULL AND last_seq < ?
			AND last_seq = (SELECT s.last_seq FROM matches s WHERE s.tenant_id = ? AND s.id = ?) RETURNING game)`)
		args = append(args, r.Seq, r.TenantID, r.MatchID, r.Seq, r.TenantID, r.MatchID)
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
	var held []string // the tables of capKinds read
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
				WHERE tenant_id = ? AND match_id = ? AND account_id || '' = x.id LIMIT 1) mp ON true
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
		// Which of the currencies and items the report names the players
		// hold: a report that grants only those needs no cap check.
		for k, kind := range capKinds {
			var pairs []any
			for _, p := range players {
				m := p.Currency
				if k == capItem {
					m = p.Items
				}
				for _, name := range sortedKeys(m) {
					if m[name] > 0 {
						pairs = append(pairs, p.AccountID, name)
					}
				}
			}
			if len(pairs) == 0 {
				continue
			}
			q.WriteString(`, h` + kind.table + ` AS (SELECT account_id, ` + kind.col + ` AS name FROM ` + kind.table + ` WHERE tenant_id = ?
				AND (account_id, ` + kind.col + `) IN (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?), ", len(pairs)/2), ", ") + `)` + kind.held + `)`)
			args = append(args, r.TenantID)
			args = append(args, pairs...)
			held = append(held, kind.table)
		}
	}
	q.WriteString(` SELECT 'c', game, NULL::bigint, NULL::text, NULL::text, NULL::float8, NULL::float8, NULL::float8, NULL::bigint, NULL::bigint FROM c`)
	if len(players) > 0 {
		q.WriteString(` UNION ALL SELECT 'a', id, xp, currency, items, NULL, NULL, NULL, NULL, NULL FROM acc
			UNION ALL SELECT 'f', account_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM ch`)
		if rated {
			q.WriteString(` UNION ALL SELECT 'r', account_id, NULL, NULL, NULL, rating, rd, volatility, matches, updated_at FROM rt`)
		}
		for _, table := range held {
			q.WriteString(` UNION ALL SELECT '` + table + `', account_id, NULL, name, NULL, NULL, NULL, NULL, NULL, NULL FROM h` + table)
		}
	}
	return &reportSteps{r: r, players: players, q1: q.String(), args1: args, applied: applied, skippedOut: skipped}
}

// scanFirst reads the first statement's rows, afresh (a job may run again).
func (x *reportSteps) scanFirst(rows Rows) error {
	x.claimed, x.game, x.missed = false, "", nil
	x.prev, x.fresh, x.locked = map[string]*playerState{}, map[string]bool{}, map[string]store.Rating{}
	x.heldFirst, x.caps = [2]map[keyRef]bool{{}, {}}, nil
	for rows.Next() {
		var kind, id string
		var xp, matches, updated sql.NullInt64
		var cur, items sql.NullString
		var rating, rd, vol sql.NullFloat64
		if err := rows.Scan(&kind, &id, &xp, &cur, &items, &rating, &rd, &vol, &matches, &updated); err != nil {
			return err
		}
		switch kind {
		case "c":
			x.claimed, x.game = true, id
		case "a":
			var err error
			if x.prev[id], err = scanPrev(xp, cur, items); err != nil {
				return err
			}
		case "f":
			x.fresh[id] = true
		case "r":
			v := store.Rating{AccountID: id, Rating: rating.Float64, RD: rd.Float64, Volatility: vol.Float64, Matches: matches.Int64}
			if updated.Int64 != 0 {
				v.UpdatedAt = FromDB(updated.Int64)
			}
			x.locked[id] = v
		case capKinds[capCurrency].table:
			x.heldFirst[capCurrency][keyRef{id, cur.String}] = true
		case capKinds[capItem].table:
			x.heldFirst[capItem][keyRef{id, cur.String}] = true
		}
	}
	return nil
}

// capsFromFirst sets x.caps from what the first statement read, if that
// is all the cap check needs: ok is false, with the keys to check, if the
// report would give a player a currency or item it does not hold.
func (x *reportSteps) capsFromFirst() (cands [2][]keyRef, ok bool) {
	cands, any := reportCandidates(x.players, x.prev, x.fresh)
	if !any {
		x.caps = nil
		return cands, true
	}
	for k := range capKinds {
		for _, c := range cands[k] {
			if !x.heldFirst[k][c] {
				return cands, false
			}
		}
	}
	x.caps = &holdings{held: x.heldFirst, count: [2]map[string]int{{}, {}}}
	return cands, true
}

// ratingKey names a rating row.
type ratingKey struct{ tenant, mode, account string }

// plan computes the claimed report's writes. ratings, if set, holds the
// rating rows written in this transaction since the first statement read
// them (by reports before this one in its round): they replace what the
// first statement returned, and get this report's.
func (x *reportSteps) plan(ratings map[ratingKey]store.Rating) (reportPlan, []any, error) {
	r := x.r
	p := planReport(r, x.game, x.players, x.prev, x.fresh, x.caps)
	x.skipped = p.skipped
	if len(p.rated) == 0 {
		return p, nil, nil
	}
	locked := x.locked
	if ratings != nil {
		locked = make(map[string]store.Rating, len(x.locked))
		for id, v := range x.locked {
			if w, ok := ratings[ratingKey{r.TenantID, r.Rating.Mode, id}]; ok {
				v = w
			}
			locked[id] = v
		}
	}
	rrows, err := rateRows(r.TenantID, r.Rating, p.rated, locked, p.at)
	if err != nil {
		return p, nil, err
	}
	if ratings != nil {
		for i := 0; i < len(rrows); i += 8 {
			id := rrows[i+2].(string)
			v := store.Rating{AccountID: id, Rating: rrows[i+3].(float64), RD: rrows[i+4].(float64),
				Volatility: rrows[i+5].(float64), Matches: rrows[i+6].(int64)}
			if at := rrows[i+7].(int64); at != 0 {
				v.UpdatedAt = FromDB(at)
			}
			ratings[ratingKey{r.TenantID, r.Rating.Mode, id}] = v
		}
	}
	return p, rrows, nil
}

// reportParams counts the parameters of writeReport's statement.
func reportParams(p reportPlan, rrows []any) int {
	return len(p.matchPlayers) + len(p.xp) + 2*len(p.cur) + len(p.items) + len(p.boards) + len(rrows)
}

// maxReportParams bounds reportParams for r, whatever the match granted
// before: a report under maxStmtParams always fits one statement.
func maxReportParams(r store.MatchReport) int {
	n := 6 * len(r.Boards)
	for _, p := range r.Players {
		n += 13 + 3 + 6 + 8 + 8*len(p.Currency) + 4*len(p.Items)
	}
	return n
}

// writeReport is the statement that writes every table of a report.
func writeReport(r store.MatchReport, p reportPlan, rrows []any) (string, []any) {
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
	return w.String(), wargs
}

// The report as a twoStep.

func (x *reportSteps) roundKey() string { return x.r.TenantID + "\x00" + x.r.MatchID }

func (x *reportSteps) first() (string, []any, func(Rows) error) { return x.q1, x.args1, x.scanFirst }

func (x *reportSteps) second(rd *round) (string, []any, func(Rows) error, error) {
	if !x.claimed {
		// claimMissed, its statement sent with the round's.
		return `SELECT ` + matchCols + ` FROM matches WHERE tenant_id = ? AND id = ?`, []any{x.r.TenantID, x.r.MatchID},
			func(rows Rows) error {
				x.missed = sql.ErrNoRows
				if rows.Next() {
					m, err := scanMatch(rows)
					if err != nil {
						return err
					}
					x.missed = claimOutcome(m, x.r)
				}
				return nil
			}, nil
	}
	if len(x.prev) == 0 {
		return "", nil, nil, nil
	}
	if _, ok := x.capsFromFirst(); !ok {
		return "", nil, nil, errStepsUnfit
	}
	if rd.ratings == nil {
		rd.ratings = map[ratingKey]store.Rating{}
	}
	p, rrows, err := x.plan(rd.ratings)
	if err != nil {
		return "", nil, nil, err
	}
	if reportParams(p, rrows) > maxStmtParams {
		// Not sent as steps (maxReportParams): a bug if it happens.
		return "", nil, nil, fmt.Errorf("match report: %d parameters in one statement", reportParams(p, rrows))
	}
	q, args := writeReport(x.r, p, rrows)
	return q, args, nil, nil
}

func (x *reportSteps) outcome() error {
	if x.applied != nil {
		*x.applied = x.claimed
	}
	if x.skippedOut != nil {
		*x.skippedOut = nil
		if x.claimed && len(x.prev) > 0 {
			*x.skippedOut = x.skipped
		}
	}
	if !x.claimed {
		return x.missed
	}
	return nil
}
