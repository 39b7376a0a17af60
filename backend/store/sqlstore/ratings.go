package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"ludus.dev/ludus/backend/store"
)

const ratingCols = `account_id, rating, rd, volatility, matches, updated_at`

func scanRating(r scanner) (store.Rating, error) {
	var x store.Rating
	var at int64
	err := r.Scan(&x.AccountID, &x.Rating, &x.RD, &x.Volatility, &x.Matches, &at)
	if at != 0 {
		x.UpdatedAt = FromDB(at)
	}
	return x, err
}

// Ratings implements store.Store.
func (s *DB) Ratings(ctx context.Context, tenantID, mode string, accountIDs []string) (map[string]store.Rating, error) {
	out := make(map[string]store.Rating, len(accountIDs))
	for i := 0; i < len(accountIDs); i += rowsPerStmt {
		chunk := accountIDs[i:min(i+rowsPerStmt, len(accountIDs))]
		args := []any{tenantID, mode}
		for _, id := range chunk {
			args = append(args, id)
		}
		rs, err := list(ctx, s, "ratings", scanRating, `SELECT `+ratingCols+` FROM ratings
			WHERE tenant_id = ? AND mode = ? AND account_id IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			r.TenantID, r.Mode = tenantID, mode
			out[r.AccountID] = r
		}
	}
	return out, nil
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// rateMatch applies a rating update to the players of a final report whose
// accounts exist (ids, sorted). It first takes each player's rating row
// with an upsert that changes nothing but locks the row (ratingsLock) and
// returns its values; new rows start at zero, which Rate reads as "never
// rated".
func rateMatch(ctx context.Context, tx *tx, tenantID string, u *store.RatingUpdate, ids []string, at int64) error {
	if len(ids) == 0 {
		return nil
	}
	var args []any
	for _, id := range ids {
		args = append(args, tenantID, u.Mode, id, 0.0, 0.0, 0.0, 0, 0)
	}
	cur := map[string]store.Rating{}
	if err := execRows(ctx, tx, ratingsInsert, ratingsLock, 8, args, func(r scanner) error {
		x, err := scanRating(r)
		cur[x.AccountID] = x
		return err
	}); err != nil {
		return err
	}
	rows, err := rateRows(tenantID, u, ids, cur, at)
	if err != nil {
		return err
	}
	return execRows(ctx, tx, ratingsInsert, ratingsWrite, 8, rows, nil)
}

// rateRows runs u.Rate on the ratings of ids before the match (cur, the
// locked rows) and returns the ratings rows to write (8 columns each).
func rateRows(tenantID string, u *store.RatingUpdate, ids []string, cur map[string]store.Rating, at int64) ([]any, error) {
	before := make([]store.Rating, len(ids))
	for i, id := range ids {
		before[i] = cur[id]
		before[i].TenantID, before[i].Mode, before[i].AccountID = tenantID, u.Mode, id
	}
	after, err := u.Rate(before)
	if err != nil {
		return nil, err
	}
	if len(after) != len(ids) {
		return nil, fmt.Errorf("rate: %d ratings for %d players", len(after), len(ids))
	}
	var rows []any
	for i, id := range ids {
		r := after[i]
		rows = append(rows, tenantID, u.Mode, id, r.Rating, r.RD, r.Volatility, before[i].Matches+1, at)
	}
	return rows, nil
}
