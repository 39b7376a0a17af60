package matchmaker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// connectError maps the package's errors to RPC codes: the one place that
// does. Context errors pass through (connect maps them to Canceled and
// DeadlineExceeded), but not inside ErrUnavailable: that is the deadline
// of a call to etcd, and the player should search again.
func connectError(err error) error {
	if err == nil {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, ErrUnavailable):
		// Before the context errors: an etcd call that timed out on its
		// own deadline (an election under way) is "search again", not the
		// caller's deadline.
		code = connect.CodeUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, ErrInvalid):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrUnauthenticated):
		code = connect.CodeUnauthenticated
	case errors.Is(err, ErrNoRules), errors.Is(err, ErrNoParty):
		code = connect.CodeNotFound
	case errors.Is(err, ErrAlreadySearching):
		code = connect.CodeAlreadyExists
	case errors.Is(err, ErrPartyFull):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, ErrTooManyModes):
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, err)
}

// Service serves MatchmakingService for players. The gateway mounts it with
// its ticket interceptor and tells it the caller.
type Service struct {
	m      *Matchmaker
	caller func(context.Context) (Caller, error)
}

var _ ludusv1connect.MatchmakingServiceHandler = (*Service)(nil)

// NewService serves m; caller returns the authenticated caller of a request
// (an error is Unauthenticated).
func NewService(m *Matchmaker, caller func(context.Context) (Caller, error)) *Service {
	return &Service{m: m, caller: caller}
}

func (s *Service) who(ctx context.Context) (Caller, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return Caller{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return c, nil
}

// FindMatch implements ludusv1connect.MatchmakingServiceHandler.
func (s *Service) FindMatch(ctx context.Context, req *connect.Request[ludusv1.FindMatchRequest], stream *connect.ServerStream[ludusv1.FindMatchResponse]) error {
	c, err := s.who(ctx)
	if err != nil {
		return connectError(err)
	}
	return connectError(s.m.Find(ctx, c, req.Msg, stream.Send))
}

// CreateParty implements ludusv1connect.MatchmakingServiceHandler.
func (s *Service) CreateParty(ctx context.Context, req *connect.Request[ludusv1.CreatePartyRequest]) (*connect.Response[ludusv1.CreatePartyResponse], error) {
	c, err := s.who(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	p, err := s.m.CreateParty(ctx, c, req.Msg)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&ludusv1.CreatePartyResponse{Code: p.Code, ExpiresAtUnixMs: p.Expires.UnixMilli()}), nil
}

// PartyTTL is how long a party code lives at least (parties created within
// partyLeaseShare of each other share a lease: up to that much longer).
const PartyTTL = 15 * time.Minute

// partyAlphabet has no 0/O or 1/I: codes are read aloud and typed.
const partyAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// CreateParty reserves a party code for the caller's party.
func (m *Matchmaker) CreateParty(ctx context.Context, c Caller, req *ludusv1.CreatePartyRequest) (clusterstate.Party, error) {
	if !clusterstate.ValidID(c.TenantID) || !clusterstate.ValidID(c.AccountID) {
		return clusterstate.Party{}, fmt.Errorf("%w: the caller has no valid tenant and account", ErrUnauthenticated)
	}
	if err := m.valid.Validate(req); err != nil {
		return clusterstate.Party{}, invalid(err)
	}
	rules, err := m.loadRules(ctx, c.TenantID, req.Mode)
	if err != nil {
		return clusterstate.Party{}, err
	}
	if int(req.Size) > rules.TeamSize {
		return clusterstate.Party{}, fmt.Errorf("%w: a party of %d is larger than a team of mode %q (%d players)", ErrInvalid, req.Size, req.Mode, rules.TeamSize)
	}
	lease, expires, err := m.partyLease(ctx)
	if err != nil {
		return clusterstate.Party{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	for range 5 {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = partyAlphabet[int(b[i])%len(partyAlphabet)] // 32 letters: uniform
		}
		p := clusterstate.Party{Code: string(b), Tenant: c.TenantID, Mode: req.Mode, Size: int(req.Size),
			Creator: c.AccountID, Expires: expires}
		err := m.state.CreateParty(ctx, p, lease)
		if errors.Is(err, clusterstate.ErrPartyExists) {
			continue
		}
		if errors.Is(err, clusterstate.ErrBusy) {
			return clusterstate.Party{}, ErrOverloaded
		}
		if err != nil {
			return clusterstate.Party{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return p, nil
	}
	return clusterstate.Party{}, fmt.Errorf("%w: no free party code; try again", ErrUnavailable)
}

// AdminService serves MatchmakingAdminService for studios: the rules of the
// caller's tenant's queues, stored in etcd.
type AdminService struct {
	state     *clusterstate.Client
	authorize func(ctx context.Context, h http.Header) (tenantID string, err error)
	m         *Matchmaker
}

var _ ludusv1connect.MatchmakingAdminServiceHandler = (*AdminService)(nil)

// NewAdminService serves the rules in state; authorize returns the tenant an
// API key (in the request's headers) belongs to, or an error (returned as
// is when it is a *connect.Error, else Unauthenticated).
func NewAdminService(state *clusterstate.Client, authorize func(ctx context.Context, h http.Header) (string, error)) (*AdminService, error) {
	m := &Matchmaker{state: state}
	v, err := newValidator()
	if err != nil {
		return nil, err
	}
	m.valid = v
	return &AdminService{state: state, authorize: authorize, m: m}, nil
}

func (a *AdminService) tenant(ctx context.Context, h http.Header) (string, error) {
	t, err := a.authorize(ctx, h)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return "", err
		}
		return "", connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !clusterstate.ValidID(t) {
		return "", connect.NewError(connect.CodeInternal, fmt.Errorf("matchmaker: tenant id %q is not an id", t))
	}
	return t, nil
}

// SetRules implements ludusv1connect.MatchmakingAdminServiceHandler.
func (a *AdminService) SetRules(ctx context.Context, req *connect.Request[ludusv1.SetRulesRequest]) (*connect.Response[ludusv1.SetRulesResponse], error) {
	tenant, err := a.tenant(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := a.m.valid.Validate(req.Msg); err != nil {
		return nil, connectError(invalid(err))
	}
	if _, err := rulesFromProto(tenant, req.Msg.Rules); err != nil {
		return nil, connectError(err)
	}
	b, err := encodeRules(req.Msg.Rules)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if err := a.state.PutMatchRules(ctx, tenant, req.Msg.Rules.Mode, b); errors.Is(err, clusterstate.ErrTooManyModes) {
		return nil, connectError(fmt.Errorf("%w: this tenant has %d matchmaking modes, the most it may: delete one with DeleteRules before adding %q",
			ErrTooManyModes, clusterstate.MaxModesPerTenant, req.Msg.Rules.Mode))
	} else if err != nil {
		return nil, connectError(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	return connect.NewResponse(&ludusv1.SetRulesResponse{}), nil
}

// GetRules implements ludusv1connect.MatchmakingAdminServiceHandler.
func (a *AdminService) GetRules(ctx context.Context, req *connect.Request[ludusv1.GetRulesRequest]) (*connect.Response[ludusv1.GetRulesResponse], error) {
	tenant, err := a.tenant(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := a.m.valid.Validate(req.Msg); err != nil {
		return nil, connectError(invalid(err))
	}
	b, err := a.state.MatchRules(ctx, tenant, req.Msg.Mode)
	if errors.Is(err, clusterstate.ErrNoRules) {
		return nil, connectError(noRules(req.Msg.Mode))
	}
	if err != nil {
		return nil, connectError(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	var p ludusv1.MatchmakingRules
	if err := decodeRulesProto(b, &p); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&ludusv1.GetRulesResponse{Rules: &p}), nil
}

// DeleteRules implements ludusv1connect.MatchmakingAdminServiceHandler.
func (a *AdminService) DeleteRules(ctx context.Context, req *connect.Request[ludusv1.DeleteRulesRequest]) (*connect.Response[ludusv1.DeleteRulesResponse], error) {
	tenant, err := a.tenant(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := a.m.valid.Validate(req.Msg); err != nil {
		return nil, connectError(invalid(err))
	}
	ok, err := a.state.DeleteMatchRules(ctx, tenant, req.Msg.Mode)
	if err != nil {
		return nil, connectError(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	if !ok {
		return nil, connectError(noRules(req.Msg.Mode))
	}
	return connect.NewResponse(&ludusv1.DeleteRulesResponse{}), nil
}
