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

// Accounts (AdminService): create, look up, delete, export.

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
		if a.PasswordHash, err = s.hashPasswordInTurn(ctx, m.Password); err != nil {
			return nil, err
		}
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

// GetAccount looks an account up by one of its ids. The device id is a
// guest's only credential (GuestLogin needs nothing else), so only an admin
// key is told it, or a caller who looked the account up by it: a read-only
// or server key must not be a way to sign in as any guest.
func (s *adminService) GetAccount(ctx context.Context, req *connect.Request[ludusv1.GetAccountRequest]) (*connect.Response[ludusv1.GetAccountResponse], error) {
	tenantID, scope, err := s.tenantScope(ctx, req.Header(), "GetAccount", needRead)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var a store.Account
	byDevice := false // looked up by the device id (the caller knows it)
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
		byDevice = true
	default:
		return nil, invalidArg(errors.New("give one of id, custom_id, email or device_id"))
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such account in this tenant"))
	} else if err != nil {
		return nil, s.internal(ctx, "get account", err)
	}
	acc := accountProto(a)
	if scope != ScopeAdmin && !byDevice {
		acc.DeviceId = ""
	}
	return connect.NewResponse(&ludusv1.GetAccountResponse{Account: acc}), nil
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
