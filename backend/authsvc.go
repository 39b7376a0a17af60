package backend

import (
	"context"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// authService implements ludus.v1.AuthService.
type authService struct{ *Server }

// GuestLogin signs in the guest account of a device, creating it on first
// use. The account and the refresh token are written in one transaction
// (store.DeviceSession); the ticket is signed after it.
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
	tenant, err := s.tenantBySlug(ctx, msg.Tenant)
	if err != nil {
		return nil, err
	}

	// A known device signs in at most SignInsPerAccount; a new one creates
	// an account, which is throttled per address and tenant instead. The
	// sign-up is reserved first and given back if the device had an
	// account after all.
	signIn := signInKey(tenant.ID, "device", msg.DeviceId)
	if err := s.signInReady(signIn); err != nil {
		return nil, err
	}
	signup, err := s.guestSignupGate(ctx, tenant.ID, msg.DeviceId, req.Peer().Addr, req.Header())
	if err != nil {
		return nil, err
	}

	now := s.now().UTC()
	acc := store.Account{ID: newID("a_"), TenantID: tenant.ID, DeviceID: msg.DeviceId, DisplayName: name, CreatedAt: now, UpdatedAt: now}
	if acc.DisplayName == "" {
		acc.DisplayName = guestName(acc.ID)
	}
	rt, rec := s.newRefresh(tenant.ID, acc.ID)
	acc, created, err := s.store.DeviceSession(ctx, acc, name, rec)
	if err != nil || !created {
		signup.release()
	}
	if err != nil {
		return nil, s.internal(ctx, "guest login", err)
	}
	if !created {
		s.signedIn(signIn)
	}
	rec.AccountID = acc.ID
	sess, err := s.sessionOf(ctx, tenant, acc, rt, rec)
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

// guestName is the display name of a guest who gave none (auth.GuestName).
func guestName(accountID string) string { return auth.GuestName(accountID) }
