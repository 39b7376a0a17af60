package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func apiKeyProto(k store.APIKey) *ludusv1.APIKey {
	return &ludusv1.APIKey{Id: k.ID, Scope: k.Scope, Name: k.Name, CreatedAt: timestamppb.New(k.CreatedAt)}
}

func checkKeyID(id string) error {
	if id == "" || len(id) > 64 {
		return errors.New("id must be an API key id like k_...")
	}
	return nil
}

// CreateAPIKey creates a key of the caller's tenant.
func (s *adminService) CreateAPIKey(ctx context.Context, req *connect.Request[ludusv1.CreateAPIKeyRequest]) (*connect.Response[ludusv1.CreateAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "CreateAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	switch req.Msg.Scope {
	case ScopeAdmin, ScopeServer, ScopeReadOnly:
	default:
		return nil, invalidArg(fmt.Errorf("scope must be %q, %q or %q, got %q", ScopeAdmin, ScopeServer, ScopeReadOnly, clip(req.Msg.Scope)))
	}
	name, err := cleanName("name", req.Msg.Name, MaxKeyNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	secret, hash := newAPIKey()
	k := store.APIKey{ID: newID("k_"), TenantID: tenantID, Hash: hash, Scope: req.Msg.Scope, Name: name, CreatedAt: s.now().UTC()}
	if err := s.store.CreateAPIKey(ctx, k); err != nil {
		return nil, s.internal(ctx, "create api key", err)
	}
	return connect.NewResponse(&ludusv1.CreateAPIKeyResponse{Key: apiKeyProto(k), Secret: secret}), nil
}

// ListAPIKeys lists the caller's tenant's keys (never their secrets).
func (s *adminService) ListAPIKeys(ctx context.Context, req *connect.Request[ludusv1.ListAPIKeysRequest]) (*connect.Response[ludusv1.ListAPIKeysResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListAPIKeys", needAdmin)
	if err != nil {
		return nil, err
	}
	ks, err := s.store.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return nil, s.internal(ctx, "list api keys", err)
	}
	out := &ludusv1.ListAPIKeysResponse{}
	for _, k := range ks {
		out.Keys = append(out.Keys, apiKeyProto(k))
	}
	return connect.NewResponse(out), nil
}

func (s *adminService) findKey(ctx context.Context, tenantID, id string) (store.APIKey, error) {
	if err := checkKeyID(id); err != nil {
		return store.APIKey{}, invalidArg(err)
	}
	ks, err := s.store.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return store.APIKey{}, s.internal(ctx, "list api keys", err)
	}
	for _, k := range ks {
		if k.ID == id {
			return k, nil
		}
	}
	return store.APIKey{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(id)))
}

// RotateAPIKey replaces a key with a fresh one of the same scope and name.
func (s *adminService) RotateAPIKey(ctx context.Context, req *connect.Request[ludusv1.RotateAPIKeyRequest]) (*connect.Response[ludusv1.RotateAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "RotateAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	old, err := s.findKey(ctx, tenantID, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	secret, hash := newAPIKey()
	k := store.APIKey{ID: newID("k_"), TenantID: tenantID, Hash: hash, Scope: old.Scope, Name: old.Name, CreatedAt: s.now().UTC()}
	if err := s.store.ReplaceAPIKey(ctx, tenantID, old.ID, k); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(old.ID)))
	} else if err != nil {
		return nil, s.internal(ctx, "rotate api key", err)
	}
	return connect.NewResponse(&ludusv1.RotateAPIKeyResponse{Key: apiKeyProto(k), Secret: secret}), nil
}

// RevokeAPIKey deletes a key.
func (s *adminService) RevokeAPIKey(ctx context.Context, req *connect.Request[ludusv1.RevokeAPIKeyRequest]) (*connect.Response[ludusv1.RevokeAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "RevokeAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	if err := checkKeyID(req.Msg.Id); err != nil {
		return nil, invalidArg(err)
	}
	if err := s.store.DeleteAPIKey(ctx, tenantID, req.Msg.Id); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(req.Msg.Id)))
	} else if err != nil {
		return nil, s.internal(ctx, "revoke api key", err)
	}
	return connect.NewResponse(&ludusv1.RevokeAPIKeyResponse{}), nil
}

// RotateSigningKey rotates the ticket signing key. Operator only.
func (s *adminService) RotateSigningKey(ctx context.Context, req *connect.Request[ludusv1.RotateSigningKeyRequest]) (*connect.Response[ludusv1.RotateSigningKeyResponse], error) {
	if err := s.operator(ctx, req.Header(), "RotateSigningKey"); err != nil {
		return nil, err
	}
	kid, err := s.Server.RotateSigningKey(ctx)
	if err != nil {
		return nil, s.internal(ctx, "rotate signing key", err)
	}
	return connect.NewResponse(&ludusv1.RotateSigningKeyResponse{Kid: kid}), nil
}

func accountProto(a store.Account) *ludusv1.Account {
	return &ludusv1.Account{Id: a.ID, DisplayName: a.DisplayName, DeviceId: a.DeviceID, Email: a.Email, CustomId: a.CustomID,
		HasPassword: a.PasswordHash != "", CreatedAt: timestamppb.New(a.CreatedAt), UpdatedAt: timestamppb.New(a.UpdatedAt)}
}

// CreateAccount creates an account for the studio's backend.
func (s *adminService) CreateAccount(ctx context.Context, req *connect.Request[ludusv1.CreateAccountRequest]) (*connect.Response[ludusv1.CreateAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "CreateAccount", needWrite)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	now := s.now().UTC()
	a := store.Account{ID: newID("a_"), TenantID: tenantID, CreatedAt: now, UpdatedAt: now}
	if a.DisplayName, err = cleanName("display_name", m.DisplayName, MaxDisplayNameLen); err != nil {
		return nil, invalidArg(err)
	}
	if m.CustomId != "" {
		if err := checkText("custom_id", m.CustomId, MaxCustomIDLen); err != nil {
			return nil, invalidArg(err)
		}
		a.CustomID = m.CustomId
	}
	if m.DeviceId != "" {
		if err := checkDeviceID(m.DeviceId); err != nil {
			return nil, invalidArg(err)
		}
		a.DeviceID = m.DeviceId
	}
	if m.Email != "" || m.Password != "" {
		if a.Email, err = cleanEmail(m.Email); err != nil {
			return nil, invalidArg(err)
		}
		if err := checkPasswordValue(m.Password); err != nil {
			return nil, invalidArg(err)
		}
		a.PasswordHash = hashPassword(s.pwParams, m.Password)
	}
	if a.CustomID == "" && a.DeviceID == "" && a.Email == "" {
		return nil, invalidArg(errors.New("give at least one of custom_id, email (with password) or device_id"))
	}
	if a.DisplayName == "" {
		a.DisplayName = guestName(a.ID)
	}
	// Throttled per tenant, like every account creation.
	signup, err := s.reserveSignup(tenantID, "", nil)
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateAccount(ctx, a); errors.Is(err, store.ErrAlreadyExists) {
		signup.release()
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("an account with this custom id, email or device exists"))
	} else if err != nil {
		signup.release()
		return nil, s.internal(ctx, "create account", err)
	}
	return connect.NewResponse(&ludusv1.CreateAccountResponse{Account: accountProto(a)}), nil
}

// account loads an account of the tenant: NotFound for ids of other tenants.
func (s *Server) account(ctx context.Context, tenantID, id string) (store.Account, error) {
	if err := checkAccountID("account_id", id); err != nil {
		return store.Account{}, invalidArg(err)
	}
	a, err := s.store.AccountByID(ctx, tenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return a, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %q in this tenant", id))
	} else if err != nil {
		return a, s.internal(ctx, "account", err)
	}
	return a, nil
}

// GetAccount looks an account up by one of its ids.
func (s *adminService) GetAccount(ctx context.Context, req *connect.Request[ludusv1.GetAccountRequest]) (*connect.Response[ludusv1.GetAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetAccount", needRead)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var a store.Account
	switch {
	case m.Id != "":
		a, err = s.account(ctx, tenantID, m.Id)
		if err != nil {
			return nil, err
		}
	case m.CustomId != "":
		if err := checkText("custom_id", m.CustomId, MaxCustomIDLen); err != nil {
			return nil, invalidArg(err)
		}
		a, err = s.store.AccountByCustomID(ctx, tenantID, m.CustomId)
	case m.Email != "":
		email, cerr := cleanEmail(m.Email)
		if cerr != nil {
			return nil, invalidArg(cerr)
		}
		a, err = s.store.AccountByEmail(ctx, tenantID, email)
	case m.DeviceId != "":
		if err := checkDeviceID(m.DeviceId); err != nil {
			return nil, invalidArg(err)
		}
		a, err = s.store.AccountByDevice(ctx, tenantID, m.DeviceId)
	default:
		return nil, invalidArg(errors.New("give one of id, custom_id, email or device_id"))
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such account in this tenant"))
	} else if err != nil {
		return nil, s.internal(ctx, "get account", err)
	}
	return connect.NewResponse(&ludusv1.GetAccountResponse{Account: accountProto(a)}), nil
}

// DeleteAccount deletes an account and its data.
func (s *adminService) DeleteAccount(ctx context.Context, req *connect.Request[ludusv1.DeleteAccountRequest]) (*connect.Response[ludusv1.DeleteAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "DeleteAccount", needAdmin)
	if err != nil {
		return nil, err
	}
	if err := checkAccountID("id", req.Msg.Id); err != nil {
		return nil, invalidArg(err)
	}
	if err := s.store.DeleteAccount(ctx, tenantID, req.Msg.Id); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %q in this tenant", req.Msg.Id))
	} else if err != nil {
		return nil, s.internal(ctx, "delete account", err)
	}
	s.log.InfoContext(ctx, "backend: account deleted", "tenant", tenantID, "account", req.Msg.Id)
	return connect.NewResponse(&ludusv1.DeleteAccountResponse{}), nil
}

// ExportAccount returns everything stored about an account as JSON.
func (s *adminService) ExportAccount(ctx context.Context, req *connect.Request[ludusv1.ExportAccountRequest]) (*connect.Response[ludusv1.ExportAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ExportAccount", needAdmin)
	if err != nil {
		return nil, err
	}
	a, err := s.account(ctx, tenantID, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	p, err := s.store.Progression(ctx, tenantID, a.ID)
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	ledger, err := s.store.Ledger(ctx, tenantID, a.ID, 100000)
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	results, err := s.store.ListMatchResults(ctx, tenantID, a.ID, 100000)
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	type playerOut struct {
		MatchID string             `json:"match_id"`
		Game    string             `json:"game"`
		EndedAt string             `json:"ended_at"`
		Result  store.PlayerReport `json:"result"`
	}
	var matches []playerOut
	for _, r := range results {
		for _, pr := range r.Players {
			if pr.AccountID == a.ID {
				matches = append(matches, playerOut{r.MatchID, r.Game, r.EndedAt.Format("2006-01-02T15:04:05.000000Z"), pr})
			}
		}
	}
	data, err := json.MarshalIndent(map[string]any{
		"account": map[string]any{"id": a.ID, "display_name": a.DisplayName, "device_id": a.DeviceID, "email": a.Email,
			"custom_id": a.CustomID, "has_password": a.PasswordHash != "", "created_at": a.CreatedAt, "updated_at": a.UpdatedAt},
		"progression": p,
		"ledger":      ledger,
		"matches":     matches,
	}, "", "  ")
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	return connect.NewResponse(&ludusv1.ExportAccountResponse{Data: data}), nil
}

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
	switch {
	case errors.Is(err, store.ErrInsufficient):
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("not enough: a balance, item count or XP would go below zero; nothing changed"))
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

func matchResultProto(r store.MatchResult) *ludusv1.MatchResult {
	out := &ludusv1.MatchResult{MatchId: r.MatchID, Game: r.Game, EndedAt: timestamppb.New(r.EndedAt)}
	for _, p := range r.Players {
		out.Players = append(out.Players, &ludusv1.PlayerResult{AccountId: p.AccountID, Score: p.Score, DurationMs: p.DurationMs,
			Damage: p.Damage, ItemsUsed: p.ItemsUsed, Xp: p.XP, Currency: p.Currency, Items: p.Items})
	}
	return out
}

// ListMatchResults lists the tenant's final match results.
func (s *adminService) ListMatchResults(ctx context.Context, req *connect.Request[ludusv1.ListMatchResultsRequest]) (*connect.Response[ludusv1.ListMatchResultsResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListMatchResults", needRead)
	if err != nil {
		return nil, err
	}
	if req.Msg.AccountId != "" {
		if _, err := s.account(ctx, tenantID, req.Msg.AccountId); err != nil {
			return nil, err
		}
	}
	rs, err := s.store.ListMatchResults(ctx, tenantID, req.Msg.AccountId, limitOf(req.Msg.Limit, 20, 200))
	if err != nil {
		return nil, s.internal(ctx, "list match results", err)
	}
	out := &ludusv1.ListMatchResultsResponse{}
	for _, r := range rs {
		out.Results = append(out.Results, matchResultProto(r))
	}
	return connect.NewResponse(out), nil
}

// GetAdminLeaderboard reads a game's leaderboard.
func (s *adminService) GetAdminLeaderboard(ctx context.Context, req *connect.Request[ludusv1.GetAdminLeaderboardRequest]) (*connect.Response[ludusv1.GetAdminLeaderboardResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetAdminLeaderboard", needRead)
	if err != nil {
		return nil, err
	}
	if req.Msg.AroundAccountId != "" {
		if _, err := s.account(ctx, tenantID, req.Msg.AroundAccountId); err != nil {
			return nil, err
		}
	}
	es, err := s.leaderboard(ctx, tenantID, req.Msg.Query, req.Msg.AroundAccountId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GetAdminLeaderboardResponse{Entries: es}), nil
}

// leaderboard answers a leaderboard query: the top, or around an account.
func (s *Server) leaderboard(ctx context.Context, tenantID string, q *ludusv1.LeaderboardRequest, around string) ([]*ludusv1.LeaderboardEntry, error) {
	if q == nil {
		return nil, invalidArg(errors.New("query is required"))
	}
	if err := checkModuleName(q.Game); err != nil {
		return nil, invalidArg(fmt.Errorf("game: %w", err))
	}
	byBest := q.Order != ludusv1.LeaderboardOrder_LEADERBOARD_ORDER_SUM
	limit := limitOf(q.Limit, 10, 100)
	offset := 0
	if around != "" {
		e, err := s.store.LeaderboardRank(ctx, tenantID, q.Game, byBest, around)
		if errors.Is(err, store.ErrNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, errors.New("the account has no result in this game yet"))
		} else if err != nil {
			return nil, s.internal(ctx, "leaderboard rank", err)
		}
		offset = max(0, int(e.Rank)-1-limit/2)
	}
	es, err := s.store.Leaderboard(ctx, tenantID, q.Game, byBest, offset, limit)
	if err != nil {
		return nil, s.internal(ctx, "leaderboard", err)
	}
	out := make([]*ludusv1.LeaderboardEntry, 0, len(es))
	for _, e := range es {
		out = append(out, &ludusv1.LeaderboardEntry{Rank: e.Rank, AccountId: e.AccountID, Best: e.Best, Sum: e.Sum, Matches: e.Matches})
	}
	return out, nil
}

// SetWebhook sets the tenant's webhook URL and returns a new signing secret.
func (s *adminService) SetWebhook(ctx context.Context, req *connect.Request[ludusv1.SetWebhookRequest]) (*connect.Response[ludusv1.SetWebhookResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "SetWebhook", needAdmin)
	if err != nil {
		return nil, err
	}
	if req.Msg.Url == "" {
		if err := s.store.PutWebhook(ctx, store.Webhook{TenantID: tenantID}); err != nil {
			return nil, s.internal(ctx, "set webhook", err)
		}
		return connect.NewResponse(&ludusv1.SetWebhookResponse{}), nil
	}
	u, err := s.checkWebhookURL(ctx, req.Msg.Url)
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.internal(ctx, "set webhook", ctx.Err())
		}
		return nil, invalidArg(err)
	}
	secret, _ := newSecret("whsec_")
	if err := s.store.PutWebhook(ctx, store.Webhook{TenantID: tenantID, URL: u.String(), Secret: []byte(secret)}); err != nil {
		return nil, s.internal(ctx, "set webhook", err)
	}
	return connect.NewResponse(&ludusv1.SetWebhookResponse{Secret: secret}), nil
}

// ListWebhookDeliveries shows the delivery state of the tenant's webhooks.
func (s *adminService) ListWebhookDeliveries(ctx context.Context, req *connect.Request[ludusv1.ListWebhookDeliveriesRequest]) (*connect.Response[ludusv1.ListWebhookDeliveriesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListWebhookDeliveries", needRead)
	if err != nil {
		return nil, err
	}
	ds, err := s.store.ListDeliveries(ctx, tenantID, limitOf(req.Msg.Limit, 50, 500))
	if err != nil {
		return nil, s.internal(ctx, "list deliveries", err)
	}
	out := &ludusv1.ListWebhookDeliveriesResponse{}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, &ludusv1.WebhookDelivery{Id: d.ID, Event: d.Event, State: d.State, Attempts: int32(d.Attempts),
			NextAttemptAt: timestamppb.New(d.NextAt), LastError: d.LastError, CreatedAt: timestamppb.New(d.CreatedAt), UpdatedAt: timestamppb.New(d.UpdatedAt)})
	}
	return connect.NewResponse(out), nil
}
