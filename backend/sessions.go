package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/internal/bearer"
)

// RefreshTTL is how long a refresh token is valid (each use makes a new one).
const RefreshTTL = 30 * 24 * time.Hour

// RefreshTokenPrefix starts every refresh token.
const RefreshTokenPrefix = "ldr_"

// Login throttling: per tenant and email, failures within ThrottleWindow
// count. After ThrottleFreeFailures, each attempt must wait 1 s, 2 s, 4 s ...
// (at most a minute) after the last failure; after LockoutFailures the email
// is locked for LockoutDuration. A success resets the count.
const (
	ThrottleWindow       = 15 * time.Minute
	ThrottleFreeFailures = 3
	LockoutFailures      = 10
	LockoutDuration      = 15 * time.Minute
)

// emailThrottleKey is the login throttle key of an email's sign-ins.
func emailThrottleKey(email string) string { return "email:" + email }

func throttleDelay(failures int) time.Duration {
	if failures < ThrottleFreeFailures {
		return 0
	}
	d := time.Second << min(failures-ThrottleFreeFailures, 6)
	return min(d, time.Minute)
}

// session issues a ticket and starts a refresh-token family for acc.
func (s *Server) session(ctx context.Context, tenant store.Tenant, acc store.Account) (*ludusv1.Session, error) {
	rt, rec := s.newRefresh(tenant.ID, acc.ID)
	if err := s.store.CreateRefreshToken(ctx, rec); err != nil {
		return nil, s.internal(ctx, "create refresh token", err)
	}
	return s.sessionOf(ctx, tenant, acc, rt, rec)
}

// newRefresh returns a new refresh token starting a family, and its record.
func (s *Server) newRefresh(tenantID, accountID string) (string, store.RefreshToken) {
	now := s.now().UTC()
	rt, hash := newSecret(RefreshTokenPrefix)
	return rt, store.RefreshToken{Hash: hash, FamilyID: newID("f_"), TenantID: tenantID, AccountID: accountID,
		CreatedAt: now, ExpiresAt: now.Add(RefreshTTL)}
}

// sessionOf signs a ticket for acc and returns the session with refresh
// token rt (already stored as rec). It touches no store: callers sign after
// their transaction, so no connection is held across the signature.
func (s *Server) sessionOf(ctx context.Context, tenant store.Tenant, acc store.Account, rt string, rec store.RefreshToken) (*ludusv1.Session, error) {
	ticket, exp, err := s.issuer.Issue(auth.Claims{TenantID: tenant.ID, TenantSlug: tenant.Slug, AccountID: acc.ID, DisplayName: acc.DisplayName})
	if err != nil {
		return nil, s.internal(ctx, "issue ticket", err)
	}
	return &ludusv1.Session{Ticket: ticket, ExpiresAt: timestamppb.New(exp), AccountId: acc.ID, DisplayName: acc.DisplayName,
		RefreshToken: rt, RefreshExpiresAt: timestamppb.New(rec.ExpiresAt)}, nil
}

// tenantBySlug finds a tenant by slug. Tenants are never renamed or deleted,
// so found ones are cached (in this process; a miss always asks the store).
func (s *Server) tenantBySlug(ctx context.Context, slug string) (store.Tenant, error) {
	if err := checkSlug("tenant", slug); err != nil {
		return store.Tenant{}, invalidArg(err)
	}
	if t, ok := s.tenants.Load(slug); ok {
		return t.(store.Tenant), nil
	}
	t, err := s.store.TenantBySlug(ctx, slug)
	if errors.Is(err, store.ErrNotFound) {
		return t, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown tenant %q", slug))
	} else if err != nil {
		return t, s.internal(ctx, "tenant", err)
	}
	s.tenants.Store(slug, t)
	return t, nil
}

// RegisterEmail creates an email+password account.
func (s *authService) RegisterEmail(ctx context.Context, req *connect.Request[ludusv1.RegisterEmailRequest]) (*connect.Response[ludusv1.RegisterEmailResponse], error) {
	m := req.Msg
	email, err := cleanEmail(m.Email)
	if err != nil {
		return nil, invalidArg(err)
	}
	if err := checkPasswordValue(m.Password); err != nil {
		return nil, invalidArg(err)
	}
	name, err := cleanName("display_name", m.DisplayName, MaxDisplayNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	tenant, err := s.tenantBySlug(ctx, m.Tenant)
	if err != nil {
		return nil, err
	}
	// Throttled per address and tenant, before the costly password hash.
	signup, err := s.reserveSignup(tenant.ID, req.Peer().Addr, req.Header())
	if err != nil {
		return nil, err
	}
	phc, err := s.hashPasswordInTurn(ctx, m.Password)
	if err != nil {
		signup.release()
		return nil, err
	}
	now := s.now().UTC()
	acc := store.Account{ID: newID("a_"), TenantID: tenant.ID, Email: email, PasswordHash: phc,
		DisplayName: name, CreatedAt: now, UpdatedAt: now}
	if acc.DisplayName == "" {
		acc.DisplayName = guestName(acc.ID)
	}
	if err := s.store.CreateAccount(ctx, acc); errors.Is(err, store.ErrAlreadyExists) {
		signup.release()
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("an account with this email exists: sign in with EmailLogin"))
	} else if err != nil {
		signup.release()
		return nil, s.internal(ctx, "register email", err)
	}
	sess, err := s.session(ctx, tenant, acc)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.RegisterEmailResponse{Session: sess}), nil
}

// EmailLogin signs in with email and password, throttled per email.
func (s *authService) EmailLogin(ctx context.Context, req *connect.Request[ludusv1.EmailLoginRequest]) (*connect.Response[ludusv1.EmailLoginResponse], error) {
	m := req.Msg
	email, err := cleanEmail(m.Email)
	if err != nil {
		return nil, invalidArg(err)
	}
	if len(m.Password) > 4*MaxPasswordLen {
		return nil, invalidArg(fmt.Errorf("password must be at most %d characters", MaxPasswordLen))
	}
	tenant, err := s.tenantBySlug(ctx, m.Tenant)
	if err != nil {
		return nil, err
	}
	signIn := signInKey(tenant.ID, "email", email)
	if err := s.signInReady(signIn); err != nil {
		return nil, err
	}
	key := emailThrottleKey(email)
	now := s.now().UTC()
	th, err := s.passwordThrottle(ctx, tenant.ID, key, now, "too many failed sign-ins for this email")
	if err != nil {
		return nil, err
	}
	acc, err := s.store.AccountByEmail(ctx, tenant.ID, email)
	found := err == nil && acc.PasswordHash != ""
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, s.internal(ctx, "account by email", err)
	}
	phc := s.dummyHash // same work whether or not the account exists
	if found {
		phc = acc.PasswordHash
	}
	release, err := s.passwordTurn(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := checkPassword(phc, m.Password)
	release()
	if err != nil {
		return nil, s.internal(ctx, "check password", err)
	}
	if !ok || !found {
		if err := s.passwordFailed(ctx, tenant.ID, key, th, now); err != nil {
			return nil, err
		}
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("wrong email or password"))
	}
	if th != (store.LoginThrottle{}) {
		if err := s.store.PutLoginThrottle(ctx, tenant.ID, key, store.LoginThrottle{}); err != nil {
			return nil, s.internal(ctx, "login throttle", err)
		}
	}
	sess, err := s.session(ctx, tenant, acc)
	if err == nil {
		s.signedIn(signIn)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.EmailLoginResponse{Session: sess}), nil
}

// passwordThrottle reads the failures of the password checks counted under
// key (an email's) and refuses a check while they say wait (locked, or the
// delay after the free failures), saying so with what.
func (s *Server) passwordThrottle(ctx context.Context, tenantID, key string, now time.Time, what string) (store.LoginThrottle, error) {
	th, err := s.store.LoginThrottle(ctx, tenantID, key)
	if err != nil {
		return th, s.internal(ctx, "login throttle", err)
	}
	if !th.LastFailure.IsZero() && now.Sub(th.LastFailure) > ThrottleWindow && now.After(th.LockedUntil) {
		th = store.LoginThrottle{} // old failures no longer count
	}
	if now.Before(th.LockedUntil) {
		return th, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%s: locked until %s", what, th.LockedUntil.Format(time.RFC3339)))
	}
	if wait := th.LastFailure.Add(throttleDelay(th.Failures)).Sub(now); th.Failures >= ThrottleFreeFailures && wait > 0 {
		return th, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%s: retry in %s", what, wait.Round(time.Second)))
	}
	return th, nil
}

// passwordFailed counts a failed password check under key.
func (s *Server) passwordFailed(ctx context.Context, tenantID, key string, th store.LoginThrottle, now time.Time) error {
	th.Failures++
	th.LastFailure = now
	if th.Failures >= LockoutFailures {
		th.LockedUntil = now.Add(LockoutDuration)
	}
	if err := s.store.PutLoginThrottle(ctx, tenantID, key, th); err != nil {
		return s.internal(ctx, "login throttle", err)
	}
	return nil
}

// endSessions revokes every refresh token of a (if not nil) after its
// password or device changed: whoever held a session of it, a thief
// included, signs in again with what it is now. The caller's own session
// ends too; its ticket lasts its 120 s.
func (s *Server) endSessions(ctx context.Context, a *store.Account) error {
	if a == nil {
		return nil
	}
	if err := s.store.RevokeAccountRefreshTokens(ctx, a.TenantID, a.ID); err != nil {
		return s.internal(ctx, "end sessions", err)
	}
	return nil
}

// errNeedCurrentPassword refuses a change of an account's sign-in without
// its password.
var errNeedCurrentPassword = connect.NewError(connect.CodePermissionDenied, errors.New(
	"this account has a password: give it as current_password to change or remove a way of signing in"))

// checkCurrentPassword proves that the caller of a change to a's sign-in
// is its owner, not merely the holder of a ticket (which lasts minutes and
// may have leaked): an account with a password needs it, checked like a
// sign-in with its email (the same throttle, so a ticket cannot be used to
// guess it either). An account without one has nothing to prove with.
func (s *Server) checkCurrentPassword(ctx context.Context, tenantID string, a store.Account, given string) error {
	if a.PasswordHash == "" {
		return nil
	}
	if given == "" {
		return errNeedCurrentPassword
	}
	if len(given) > 4*MaxPasswordLen {
		return invalidArg(fmt.Errorf("current_password must be at most %d characters", MaxPasswordLen))
	}
	key := emailThrottleKey(a.Email)
	now := s.now().UTC()
	th, err := s.passwordThrottle(ctx, tenantID, key, now, "too many wrong passwords for this account")
	if err != nil {
		return err
	}
	release, err := s.passwordTurn(ctx)
	if err != nil {
		return err
	}
	ok, err := checkPassword(a.PasswordHash, given)
	release()
	if err != nil {
		return s.internal(ctx, "check password", err)
	}
	if !ok {
		if err := s.passwordFailed(ctx, tenantID, key, th, now); err != nil {
			return err
		}
		return connect.NewError(connect.CodePermissionDenied, errors.New("current_password is not this account's password"))
	}
	return nil
}

// CustomLogin signs in the account of a studio's player id, vouched for by a
// server (or admin) API key of the tenant.
func (s *authService) CustomLogin(ctx context.Context, req *connect.Request[ludusv1.CustomLoginRequest]) (*connect.Response[ludusv1.CustomLoginResponse], error) {
	tenantID, err := (&adminService{s.Server}).tenantCall(ctx, req.Header(), "CustomLogin", needWrite)
	if err != nil {
		return nil, err
	}
	if err := checkText("custom_id", req.Msg.CustomId, MaxCustomIDLen); err != nil {
		return nil, invalidArg(err)
	}
	name, err := cleanName("display_name", req.Msg.DisplayName, MaxDisplayNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	tenant, err := s.store.TenantByID(ctx, tenantID)
	if err != nil {
		return nil, s.internal(ctx, "tenant", err)
	}
	signIn := signInKey(tenantID, "custom", req.Msg.CustomId)
	if err := s.signInReady(signIn); err != nil {
		return nil, err
	}
	acc, err := s.store.AccountByCustomID(ctx, tenantID, req.Msg.CustomId)
	existing := err == nil
	if errors.Is(err, store.ErrNotFound) {
		// A new account: throttled per tenant (not per address: the caller
		// is the studio's server, signing in all of its players).
		signup, serr := s.reserveSignup(tenantID, "", nil)
		if serr != nil {
			return nil, serr
		}
		now := s.now().UTC()
		acc = store.Account{ID: newID("a_"), TenantID: tenantID, CustomID: req.Msg.CustomId, DisplayName: name, CreatedAt: now, UpdatedAt: now}
		if acc.DisplayName == "" {
			acc.DisplayName = guestName(acc.ID)
		}
		if err = s.store.CreateAccount(ctx, acc); err != nil {
			signup.release()
		}
		if errors.Is(err, store.ErrAlreadyExists) {
			acc, err = s.store.AccountByCustomID(ctx, tenantID, req.Msg.CustomId)
		}
	} else if err == nil && name != "" && name != acc.DisplayName {
		acc.DisplayName = name
		err = s.store.SetDisplayName(ctx, tenantID, acc.ID, name, s.now().UTC())
	}
	if err != nil {
		return nil, s.internal(ctx, "custom login", err)
	}
	sess, err := s.session(ctx, tenant, acc)
	if err != nil {
		return nil, err
	}
	if existing {
		s.signedIn(signIn)
	}
	return connect.NewResponse(&ludusv1.CustomLoginResponse{Session: sess}), nil
}

func checkRefreshToken(t string) error {
	if !strings.HasPrefix(t, RefreshTokenPrefix) || len(t) > MaxRefreshTokenLen {
		return errors.New("refresh_token is not a refresh token (they start with " + RefreshTokenPrefix + ")")
	}
	return nil
}

var errBadRefresh = connect.NewError(connect.CodeUnauthenticated, errors.New("refresh token is unknown, used, revoked or expired: sign in again"))

// Refresh rotates a refresh token.
func (s *authService) Refresh(ctx context.Context, req *connect.Request[ludusv1.RefreshRequest]) (*connect.Response[ludusv1.RefreshResponse], error) {
	if err := checkRefreshToken(req.Msg.RefreshToken); err != nil {
		return nil, invalidArg(err)
	}
	tenant, err := s.tenantBySlug(ctx, req.Msg.Tenant)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	rt, hash := newSecret(RefreshTokenPrefix)
	next := store.RefreshToken{Hash: hash, CreatedAt: now, ExpiresAt: now.Add(RefreshTTL)}
	old, err := s.store.UseRefreshToken(ctx, hashSecret(req.Msg.RefreshToken), now, next)
	switch {
	case errors.Is(err, store.ErrRefreshReused):
		s.log.WarnContext(ctx, "backend: refresh token reused; its family is revoked", "tenant", old.TenantID, "account", old.AccountID)
		return nil, errBadRefresh
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrRevoked):
		return nil, errBadRefresh
	case err != nil:
		return nil, s.internal(ctx, "refresh", err)
	}
	if old.TenantID != tenant.ID {
		// Another tenant's token: it is now consumed; revoke its family.
		s.store.RevokeRefreshFamily(ctx, hash)
		return nil, errBadRefresh
	}
	acc, err := s.store.AccountByID(ctx, tenant.ID, old.AccountID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadRefresh
	} else if err != nil {
		return nil, s.internal(ctx, "refresh: account", err)
	}
	ticket, exp, err := s.issuer.Issue(auth.Claims{TenantID: tenant.ID, TenantSlug: tenant.Slug, AccountID: acc.ID, DisplayName: acc.DisplayName})
	if err != nil {
		return nil, s.internal(ctx, "issue ticket", err)
	}
	return connect.NewResponse(&ludusv1.RefreshResponse{Session: &ludusv1.Session{Ticket: ticket, ExpiresAt: timestamppb.New(exp),
		AccountId: acc.ID, DisplayName: acc.DisplayName, RefreshToken: rt, RefreshExpiresAt: timestamppb.New(next.ExpiresAt)}}), nil
}

// Logout revokes a refresh token's family. Unknown tokens are not an error
// (logging out twice is fine).
func (s *authService) Logout(ctx context.Context, req *connect.Request[ludusv1.LogoutRequest]) (*connect.Response[ludusv1.LogoutResponse], error) {
	if err := checkRefreshToken(req.Msg.RefreshToken); err != nil {
		return nil, invalidArg(err)
	}
	if _, err := s.tenantBySlug(ctx, req.Msg.Tenant); err != nil {
		return nil, err
	}
	if err := s.store.RevokeRefreshFamily(ctx, hashSecret(req.Msg.RefreshToken)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, s.internal(ctx, "logout", err)
	}
	return connect.NewResponse(&ludusv1.LogoutResponse{}), nil
}

// player verifies the session ticket of a call.
func (s *Server) player(ctx context.Context, h http.Header) (*auth.Claims, error) {
	t, ok := bearer.FromHeader(h)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(`missing session ticket: send "Authorization: Bearer <ticket>"`))
	}
	c, err := s.Verifier().Verify(ctx, t)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return c, nil
}

// updateOwnAccount loads the caller's account, applies f and stores it.
func (s *Server) updateOwnAccount(ctx context.Context, h http.Header, f func(a *store.Account) error) error {
	c, err := s.player(ctx, h)
	if err != nil {
		return err
	}
	acc, err := s.store.AccountByID(ctx, c.TenantID, c.AccountID)
	if errors.Is(err, store.ErrNotFound) {
		return connect.NewError(connect.CodeNotFound, errors.New("your account no longer exists"))
	} else if err != nil {
		return s.internal(ctx, "account", err)
	}
	if err := f(&acc); err != nil {
		return err
	}
	acc.UpdatedAt = s.now().UTC()
	if err := s.store.UpdateAccount(ctx, acc); errors.Is(err, store.ErrAlreadyExists) {
		return connect.NewError(connect.CodeAlreadyExists, errors.New("that sign-in is already linked to another account"))
	} else if err != nil {
		return s.internal(ctx, "update account", err)
	}
	return nil
}

// LinkDevice binds a device id to the caller's account.
func (s *authService) LinkDevice(ctx context.Context, req *connect.Request[ludusv1.LinkDeviceRequest]) (*connect.Response[ludusv1.LinkDeviceResponse], error) {
	if err := checkDeviceID(req.Msg.DeviceId); err != nil {
		return nil, invalidArg(err)
	}
	var replaced *store.Account
	err := s.updateOwnAccount(ctx, req.Header(), func(a *store.Account) error {
		if a.DeviceID != "" && a.DeviceID != req.Msg.DeviceId {
			// A replacement takes the device from whoever holds it.
			if a.PasswordHash == "" {
				return connect.NewError(connect.CodeFailedPrecondition, errors.New(
					"this account is linked to another device; only an account with a password can replace it: link an email and password first (LinkEmail), then give it as current_password"))
			}
			if err := s.checkCurrentPassword(ctx, a.TenantID, *a, req.Msg.CurrentPassword); err != nil {
				return err
			}
			replaced = a
		}
		a.DeviceID = req.Msg.DeviceId
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.endSessions(ctx, replaced); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.LinkDeviceResponse{}), nil
}

// LinkEmail sets an email and password on the caller's account.
func (s *authService) LinkEmail(ctx context.Context, req *connect.Request[ludusv1.LinkEmailRequest]) (*connect.Response[ludusv1.LinkEmailResponse], error) {
	email, err := cleanEmail(req.Msg.Email)
	if err != nil {
		return nil, invalidArg(err)
	}
	if err := checkPasswordValue(req.Msg.Password); err != nil {
		return nil, invalidArg(err)
	}
	// The hash is made once the caller is known (updateOwnAccount checks the
	// ticket first): a call without one costs no argon2 work.
	var changed *store.Account
	err = s.updateOwnAccount(ctx, req.Header(), func(a *store.Account) error {
		if err := s.checkCurrentPassword(ctx, a.TenantID, *a, req.Msg.CurrentPassword); err != nil {
			return err
		}
		phc, err := s.hashPasswordInTurn(ctx, req.Msg.Password)
		if err != nil {
			return err
		}
		if a.PasswordHash != "" {
			changed = a
		}
		a.Email, a.PasswordHash = email, phc
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.endSessions(ctx, changed); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.LinkEmailResponse{}), nil
}

// Unlink removes a way of signing in, never the last one.
func (s *authService) Unlink(ctx context.Context, req *connect.Request[ludusv1.UnlinkRequest]) (*connect.Response[ludusv1.UnlinkResponse], error) {
	switch req.Msg.Identity {
	case ludusv1.Identity_IDENTITY_DEVICE, ludusv1.Identity_IDENTITY_EMAIL, ludusv1.Identity_IDENTITY_CUSTOM:
	default:
		return nil, invalidArg(errors.New("identity must be DEVICE, EMAIL or CUSTOM"))
	}
	err := s.updateOwnAccount(ctx, req.Header(), func(a *store.Account) error {
		if err := s.checkCurrentPassword(ctx, a.TenantID, *a, req.Msg.CurrentPassword); err != nil {
			return err
		}
		switch req.Msg.Identity {
		case ludusv1.Identity_IDENTITY_DEVICE:
			a.DeviceID = ""
		case ludusv1.Identity_IDENTITY_EMAIL:
			a.Email, a.PasswordHash = "", ""
		case ludusv1.Identity_IDENTITY_CUSTOM:
			a.CustomID = ""
		}
		if a.DeviceID == "" && a.Email == "" && a.CustomID == "" {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("cannot unlink the last way of signing in to this account"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.UnlinkResponse{}), nil
}
