package sqlstore

import (
	"context"

	"ludus.dev/ludus/backend/store"
)

// PutResultRules implements store.Store.
func (s *DB) PutResultRules(ctx context.Context, tenantID string, rules []store.ResultRule) error {
	return s.inTx(ctx, "put result rules", func(tx *tx) error {
		var n int
		if err := tx.row(ctx, `SELECT COUNT(*) FROM tenants WHERE id = ?`, tenantID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		if _, err := tx.exec(ctx, `DELETE FROM result_rules WHERE tenant_id = ?`, tenantID); err != nil {
			return err
		}
		var args []any
		for i, r := range rules {
			args = append(args, tenantID, i, r.Game, r.Stat, r.Kind, r.Target, r.PerUnit, r.Cap)
		}
		return execRows(ctx, tx, `INSERT INTO result_rules (tenant_id, seq, game, stat, kind, target, per_unit, cap)`, ``, 8, args, nil)
	})
}

// ResultRules implements store.Store.
func (s *DB) ResultRules(ctx context.Context, tenantID string) ([]store.ResultRule, error) {
	return list(ctx, s, "result rules", func(r scanner) (store.ResultRule, error) {
		var rule store.ResultRule
		err := r.Scan(&rule.Game, &rule.Stat, &rule.Kind, &rule.Target, &rule.PerUnit, &rule.Cap)
		return rule, err
	}, `SELECT game, stat, kind, target, per_unit, cap FROM result_rules WHERE tenant_id = ? ORDER BY seq`, tenantID)
}
