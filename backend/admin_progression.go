package backend

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Progression (AdminService): XP, levels, wallet and ledger.

// Level curve: level n (1-based) starts at 100*n*(n-1)/2 XP.
func levelOf(xp int64) (level int32, next int64) {
	level = 1
	for int64(100)*int64(level)*int64(level+1)/2 <= xp && level < 1_000_000 {
		level++
	}
	return level, int64(100) * int64(level) * int64(level+1) / 2
}

func progressionProto(p store.Progression) *ludusv1.Progression {
	level, next := levelOf(p.XP)
	return &ludusv1.Progression{Xp: p.XP, Level: level, NextLevelXp: next, Currency: p.Currency, Items: p.Items}
}

// GrantProgression applies an idempotent change to an account.
func (s *adminService) GrantProgression(ctx context.Context, req *connect.Request[ludusv1.GrantProgressionRequest]) (*connect.Response[ludusv1.GrantProgressionResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GrantProgression", needWrite)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if err := checkText("idempotency_key", m.IdempotencyKey, MaxIdempotencyKeyLen); err != nil {
		return nil, invalidArg(err)
	}
	if m.Xp > MaxDelta || m.Xp < -MaxDelta {
		return nil, invalidArg(errors.New("xp is out of range"))
	}
	if err := checkAmounts("currency", m.Currency, true); err != nil {
		return nil, invalidArg(err)
	}
	if err := checkAmounts("items", m.Items, true); err != nil {
		return nil, invalidArg(err)
	}
	reason, err := cleanName("reason", m.Reason, MaxReasonLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	a, err := s.account(ctx, tenantID, m.AccountId)
	if err != nil {
		return nil, err
	}
	applied, err := s.store.ApplyChange(ctx, store.Change{TenantID: tenantID, AccountID: a.ID, Key: m.IdempotencyKey, XP: m.Xp,
		Currency: m.Currency, Items: m.Items, Reason: reason, At: s.now().UTC()})
	var limit *store.LimitError
	switch {
	case errors.Is(err, store.ErrInsufficient):
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("not enough: a balance, item count or XP would go below zero; nothing changed"))
	case errors.As(err, &limit):
		return nil, connect.NewError(connect.CodeResourceExhausted, limitMessage(a.ID, limit))
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %q in this tenant", a.ID))
	case err != nil:
		return nil, s.internal(ctx, "grant", err)
	}
	p, err := s.store.Progression(ctx, tenantID, a.ID)
	if err != nil {
		return nil, s.internal(ctx, "progression", err)
	}
	return connect.NewResponse(&ludusv1.GrantProgressionResponse{Applied: applied, Progression: progressionProto(p)}), nil
}

func ledgerProto(l []store.LedgerEntry) []*ludusv1.LedgerEntry {
	out := make([]*ludusv1.LedgerEntry, 0, len(l))
	for _, e := range l {
		out = append(out, &ludusv1.LedgerEntry{Seq: e.Seq, Currency: e.Currency, Delta: e.Delta, Balance: e.Balance,
			IdempotencyKey: e.Key, Reason: e.Reason, At: timestamppb.New(e.At)})
	}
	return out
}

func limitOf(n int32, def, max int) int {
	if n <= 0 {
		return def
	}
	return min(int(n), max)
}

// GetAccountProgression reads an account's progression and ledger.
func (s *adminService) GetAccountProgression(ctx context.Context, req *connect.Request[ludusv1.GetAccountProgressionRequest]) (*connect.Response[ludusv1.GetAccountProgressionResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetAccountProgression", needRead)
	if err != nil {
		return nil, err
	}
	a, err := s.account(ctx, tenantID, req.Msg.AccountId)
	if err != nil {
		return nil, err
	}
	p, err := s.store.Progression(ctx, tenantID, a.ID)
	if err != nil {
		return nil, s.internal(ctx, "progression", err)
	}
	l, err := s.store.Ledger(ctx, tenantID, a.ID, limitOf(req.Msg.LedgerLimit, 20, 200))
	if err != nil {
		return nil, s.internal(ctx, "ledger", err)
	}
	return connect.NewResponse(&ludusv1.GetAccountProgressionResponse{Progression: progressionProto(p), Ledger: ledgerProto(l)}), nil
}

// limitMessage says why a grant past an account's cap on distinct
// currencies or items was refused, and what to do.
func limitMessage(accountID string, e *store.LimitError) error {
	advice := "grant only currencies it holds (a currency stays held at a zero balance)"
	if e.What == "items" {
		advice = "take away items it no longer needs (an item whose count reaches zero is no longer held), or grant only items it holds"
	}
	return fmt.Errorf("account %s holds %d distinct %s and this grant would add %d more; an account holds at most %d: %s; nothing changed",
		accountID, e.Held, e.What, e.New, e.Max, advice)
}
