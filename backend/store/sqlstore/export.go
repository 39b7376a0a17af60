package sqlstore

import (
	"context"

	"ludus.dev/ludus/backend/store"
)

// What an account export reads besides the ledger and the match results
// (sqlstore.go): each kind with one query, streamed, by the account's own
// index of its table (changes_applied's primary key, refresh_tokens'
// (account_id, family_id), leaderboard_account, ratings_account,
// match_players_account, match_roster_account), never a query per row.
//
// SQLite keeps no statistics (no ANALYZE), so it would as soon read a
// primary key by its tenant_id prefix, every row of the tenant, as the
// account's index: "tenant_id || ''" takes the tenant's column out of the
// index choice, and CROSS JOIN makes SQLite start from the account's rows
// (PostgreSQL plans both as usual).

// EachAppliedChange implements store.Store.
func (s *DB) EachAppliedChange(ctx context.Context, tenantID, accountID string, fn func(store.AppliedChange) error) error {
	return each(ctx, s, "each applied change", func(r scanner) (store.AppliedChange, error) {
		var c store.AppliedChange
		var at int64
		err := r.Scan(&c.Key, &at)
		c.At = FromDB(at)
		return c, err
	}, fn, `SELECT key, at FROM changes_applied WHERE tenant_id = ? AND account_id = ? ORDER BY at DESC, key`, tenantID, accountID)
}

// EachAccountSession implements store.Store. A family's tokens share its
// revocation (revokeFamily marks them all), so MAX(revoked) is any's.
func (s *DB) EachAccountSession(ctx context.Context, tenantID, accountID string, fn func(store.AccountSession) error) error {
	return each(ctx, s, "each account session", func(r scanner) (store.AccountSession, error) {
		var x store.AccountSession
		var first, last, expires, revoked int64
		err := r.Scan(&first, &last, &expires, &revoked)
		x.FirstTokenAt, x.LastTokenAt, x.ExpiresAt, x.Revoked = FromDB(first), FromDB(last), FromDB(expires), revoked != 0
		return x, err
	}, fn, `SELECT MIN(created_at), MAX(created_at), MAX(expires_at), MAX(revoked) FROM refresh_tokens
		WHERE account_id = ? AND tenant_id = ? GROUP BY family_id ORDER BY MAX(created_at) DESC, family_id`, accountID, tenantID)
}

// EachAccountBoard implements store.Store.
func (s *DB) EachAccountBoard(ctx context.Context, tenantID, accountID string, fn func(store.AccountBoard) error) error {
	return each(ctx, s, "each account board", func(r scanner) (store.AccountBoard, error) {
		var b store.AccountBoard
		return b, r.Scan(&b.Board, &b.Best, &b.Sum, &b.Matches)
	}, fn, `SELECT game, best, total, matches FROM leaderboard WHERE tenant_id || '' = ? AND account_id = ? ORDER BY game`, tenantID, accountID)
}

// EachAccountRating implements store.Store.
func (s *DB) EachAccountRating(ctx context.Context, tenantID, accountID string, fn func(store.Rating) error) error {
	return each(ctx, s, "each account rating", func(r scanner) (store.Rating, error) {
		var x store.Rating
		var at int64
		err := r.Scan(&x.Mode, &x.Rating, &x.RD, &x.Volatility, &x.Matches, &at)
		x.TenantID, x.AccountID = tenantID, accountID
		if at != 0 {
			x.UpdatedAt = FromDB(at)
		}
		return x, err
	}, fn, `SELECT mode, rating, rd, volatility, matches, updated_at FROM ratings WHERE tenant_id || '' = ? AND account_id = ? ORDER BY mode`,
		tenantID, accountID)
}

// EachUnfinishedAccountMatch implements store.Store.
func (s *DB) EachUnfinishedAccountMatch(ctx context.Context, tenantID, accountID string, fn func(store.AccountMatch) error) error {
	return each(ctx, s, "each unfinished account match", func(r scanner) (store.AccountMatch, error) {
		var m store.AccountMatch
		var created int64
		p, _, err := scanPlayer(r, &m.MatchID, &m.Game, &created)
		m.CreatedAt, m.Player = FromDB(created), p
		return m, err
	}, fn, `SELECT m.id, m.game, m.created_at, `+playerCols+` FROM match_players p
		CROSS JOIN matches m WHERE m.tenant_id = p.tenant_id AND m.id = p.match_id
		AND p.tenant_id || '' = ? AND p.account_id = ? AND m.ended_at IS NULL ORDER BY m.created_at DESC, m.id`, tenantID, accountID)
}

// EachAccountRosterEntry implements store.Store.
func (s *DB) EachAccountRosterEntry(ctx context.Context, tenantID, accountID string, fn func(store.RosterEntry) error) error {
	return each(ctx, s, "each account roster entry", func(r scanner) (store.RosterEntry, error) {
		var e store.RosterEntry
		var added int64
		err := r.Scan(&e.MatchID, &added)
		e.AddedAt = FromDB(added)
		return e, err
	}, fn, AccountRosterQuery, tenantID, accountID)
}

// AccountRosterQuery selects the rosters an account is on, newest first. It
// reads match_roster_account (SQLite schema 13, PostgreSQL 12), the
// account's entries; match_roster's primary key, (tenant_id, match_id,
// account_id), would find them only by reading every roster of the
// tenant. Both columns of the index are compared plainly: the primary key
// matches one of them, the index two, so SQLite prefers the index without
// statistics.
const AccountRosterQuery = `SELECT match_id, added_at FROM match_roster WHERE tenant_id = ? AND account_id = ? ORDER BY added_at DESC, match_id`
