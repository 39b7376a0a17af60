package backend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// authService implements ludus.v1.AuthService.
type authService struct{ *Server }

// GuestLogin signs in the guest account of a device, creating it on first use.
func (s *authService) GuestLogin(ctx context.Context, req *connect.Request[ludusv1.GuestLoginRequest]) (*connect.Response[ludusv1.GuestLoginResponse], error) {
	msg := req.Msg
	if err := checkSlug("tenant", msg.Tenant); err != nil {
		return nil, invalidArg(err)
	}
	if err := checkDeviceID(msg.DeviceId); err != nil {
		return nil, invalidArg(err)
	}
	name, err := cleanName("display_name", msg.DisplayName, MaxDisplayNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}

	tenant, err := s.store.TenantBySlug(ctx, msg.Tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown tenant %q", msg.Tenant))
	} else if err != nil {
		return nil, s.internal(ctx, "guest login: tenant", err)
	}

	acc, err := s.guestAccount(ctx, tenant.ID, msg.DeviceId, name)
	if err != nil {
		return nil, s.internal(ctx, "guest login: account", err)
	}

	sess, err := s.session(ctx, tenant, acc)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GuestLoginResponse{
		Ticket:           sess.Ticket,
		ExpiresAt:        sess.ExpiresAt,
		AccountId:        acc.ID,
		DisplayName:      acc.DisplayName,
		RefreshToken:     sess.RefreshToken,
		RefreshExpiresAt: sess.RefreshExpiresAt,
	}), nil
}

// guestAccount returns the device's account, creating it if needed and
// renaming it if name is set and differs.
func (s *authService) guestAccount(ctx context.Context, tenantID, deviceID, name string) (store.Account, error) {
	acc, err := s.store.AccountByDevice(ctx, tenantID, deviceID)
	if errors.Is(err, store.ErrNotFound) {
		now := s.now().UTC()
		acc = store.Account{ID: newID("a_"), TenantID: tenantID, DeviceID: deviceID, DisplayName: name, CreatedAt: now, UpdatedAt: now}
		if acc.DisplayName == "" {
			acc.DisplayName = guestName(acc.ID)
		}
		err = s.store.CreateAccount(ctx, acc)
		if err == nil {
			return acc, nil
		}
		if !errors.Is(err, store.ErrAlreadyExists) {
			return store.Account{}, err
		}
		// The same device signed in concurrently: use that account.
		acc, err = s.store.AccountByDevice(ctx, tenantID, deviceID)
	}
	if err != nil {
		return store.Account{}, err
	}
	if name != "" && name != acc.DisplayName {
		if err := s.store.SetDisplayName(ctx, tenantID, acc.ID, name, s.now().UTC()); err != nil {
			return store.Account{}, err
		}
		acc.DisplayName = name
	}
	return acc, nil
}

// guestName is the display name of a guest who gave none: "guest-" and four
// hex digits derived from the account id, so it is stable.
func guestName(accountID string) string {
	sum := sha256.Sum256([]byte(accountID))
	return "guest-" + hex.EncodeToString(sum[:2])
}
