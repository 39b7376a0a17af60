package sqlstore

import (
	"context"
	"slices"
	"strings"

	"ludus.dev/ludus/backend/store"
)

// Caps on the distinct currencies and items an account holds
// (store.MaxCurrenciesPerAccount, store.MaxItemsPerAccount).
//
// A grant (ApplyChange) that would take an account past a cap is refused
// whole. A match report is not: its result is applied once and must not
// fail for good, so the keys that do not fit are left out (in name order,
// after the keys the account holds, which always fit) and the rest applies
// (planReport).
//
// Only a key the account does not hold can take it past a cap, so the
// check first reads which of the keys a change grants the account holds
// (one query per table); only if some are new does it lock the account's
// progression row (a no-op upsert) and then count what the account holds.
// On PostgreSQL two transactions adding keys to one account so count one
// after the other: each statement after the lock sees what the other
// committed. SQLite has one writer.

// capKind is one of the capped kinds of keys: its table and bound.
type capKind struct {
	what  string // store.LimitError.What
	kind  string // store.SkippedGrant.Kind
	max   int
	table string
	col   string
	// held is the condition of a row that counts as held.
	held string
}

// The capped kinds; holdings and candidates index by position.
var capKinds = [2]capKind{
	{"currencies", store.RuleCurrency, store.MaxCurrenciesPerAccount, "wallet", "currency", ""},
	{"items", store.RuleItem, store.MaxItemsPerAccount, "inventory", "item", " AND quantity <> 0"},
}

const (
	capCurrency = 0
	capItem     = 1
)

// keyRef is an account's currency or item.
type keyRef struct{ account, name string }

// holdings is what the cap check read for some candidate keys: which of
// them the accounts hold, and how many keys of the kind each account holds
// that would get one it does not (read after locking it).
type holdings struct {
	held  [2]map[keyRef]bool
	count [2]map[string]int
}

// heldPairsPerStmt bounds the (account, key) pairs of one query.
const heldPairsPerStmt = 200

// readHoldings reads what the cap check needs of cands (per capKinds
// index: the keys a change would grant that may be new), locking the
// accounts that would get a key they do not hold.
func readHoldings(ctx context.Context, tx *tx, tenantID string, cands [2][]keyRef) (*holdings, error) {
	h := &holdings{}
	for k := range capKinds {
		h.held[k], h.count[k] = map[keyRef]bool{}, map[string]int{}
		if err := readHeld(ctx, tx, tenantID, k, cands[k], h.held[k]); err != nil {
			return nil, err
		}
	}
	var needy []string
	for k := range capKinds {
		for _, c := range cands[k] {
			if !h.held[k][c] {
				needy = append(needy, c.account)
			}
		}
	}
	if len(needy) == 0 {
		return h, nil
	}
	slices.Sort(needy) // locks in account order, as every writer takes them
	needy = slices.Compact(needy)
	var lock []any
	for _, a := range needy {
		lock = append(lock, tenantID, a, int64(0))
	}
	if err := execRows(ctx, tx, progressionInsert, `ON CONFLICT (tenant_id, account_id) DO UPDATE SET xp = progression.xp`, 3, lock, nil); err != nil {
		return nil, err
	}
	// Again after the lock: a key may have been added meanwhile.
	isNeedy := map[string]bool{}
	for _, a := range needy {
		isNeedy[a] = true
	}
	for k, kind := range capKinds {
		var again []keyRef
		for _, c := range cands[k] {
			if isNeedy[c.account] && !h.held[k][c] {
				again = append(again, c)
			}
		}
		if err := readHeld(ctx, tx, tenantID, k, again, h.held[k]); err != nil {
			return nil, err
		}
		for i := 0; i < len(needy); i += rowsPerStmt {
			chunk := needy[i:min(i+rowsPerStmt, len(needy))]
			args := []any{tenantID}
			for _, a := range chunk {
				args = append(args, a)
			}
			rows, err := tx.query(ctx, `SELECT account_id, COUNT(*) FROM `+kind.table+` WHERE tenant_id = ? AND account_id IN (`+
				placeholders(len(chunk))+`)`+kind.held+` GROUP BY account_id`, args...)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var a string
				var n int
				if err := rows.Scan(&a, &n); err != nil {
					rows.Close()
					return nil, err
				}
				h.count[k][a] = n
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// readHeld adds the keys of refs (of kind k) that their accounts hold to held.
func readHeld(ctx context.Context, tx *tx, tenantID string, k int, refs []keyRef, held map[keyRef]bool) error {
	kind := capKinds[k]
	for i := 0; i < len(refs); i += heldPairsPerStmt {
		chunk := refs[i:min(i+heldPairsPerStmt, len(refs))]
		args := []any{tenantID}
		for _, r := range chunk {
			args = append(args, r.account, r.name)
		}
		rows, err := tx.query(ctx, `SELECT account_id, `+kind.col+` FROM `+kind.table+` WHERE tenant_id = ? AND (account_id, `+kind.col+`) IN (VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?), ", len(chunk)), ", ")+`)`+kind.held, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r keyRef
			if err := rows.Scan(&r.account, &r.name); err != nil {
				rows.Close()
				return err
			}
			held[r] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// fits decides which of an account's candidate keys of kind k (sorted)
// it may be granted: those it holds, and new ones in order while it holds
// fewer than the bound. The others are returned as skipped.
func (h *holdings) fits(k int, account string, names []string) (ok map[string]bool, skipped []string) {
	ok = make(map[string]bool, len(names))
	n := h.count[k][account]
	for _, name := range names {
		switch {
		case h.held[k][keyRef{account, name}]:
			ok[name] = true
		case n < capKinds[k].max:
			ok[name] = true
			n++
		default:
			skipped = append(skipped, name)
		}
	}
	return ok, skipped
}

// checkChangeCaps refuses a change that would take its account past a cap
// (a *store.LimitError), nothing applied.
func checkChangeCaps(ctx context.Context, tx *tx, c store.Change) error {
	var cands [2][]keyRef
	for k, m := range [2]map[string]int64{c.Currency, c.Items} {
		for _, name := range sortedKeys(m) {
			if m[name] > 0 {
				cands[k] = append(cands[k], keyRef{c.AccountID, name})
			}
		}
	}
	if len(cands[capCurrency]) == 0 && len(cands[capItem]) == 0 {
		return nil
	}
	h, err := readHoldings(ctx, tx, c.TenantID, cands)
	if err != nil {
		return err
	}
	for k, kind := range capKinds {
		added := 0
		for _, r := range cands[k] {
			if !h.held[k][r] {
				added++
			}
		}
		if held := h.count[k][c.AccountID]; added > 0 && held+added > kind.max {
			return &store.LimitError{What: kind.what, Max: kind.max, Held: held, New: added}
		}
	}
	return nil
}
