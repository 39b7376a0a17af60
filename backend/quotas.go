package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Quotas per tenant (issue 14): the operator sets them (QuotaService.SetQuotas),
// a tenant reads its own; gateways enforce them at CreateGame (gateway/
// admission.go) with what QuotaClusterService.GetTenantQuotas (usage.go)
// tells them. 0 is unlimited.

// Bounds of each quota (a larger value is InvalidArgument).
const (
	MaxQuotaLiveGames         = 1_000_000
	MaxQuotaGamesPerMinute    = 100_000
	MaxQuotaCPUSecondsPerHour = 360_000_000 // 100,000 cores
	MaxQuotaArchiveBytes      = 1 << 50
	MaxQuotaGameDurationS     = 7 * 24 * 3600
)

// quotaService implements ludus.v1.QuotaService.
type quotaService struct{ *Server }

// checkQuotas validates quotas: each 0 (unlimited) up to its bound.
func checkQuotas(q *ludusv1.Quotas) error {
	if q == nil {
		return errors.New("quotas is required (send every quota; 0 means unlimited)")
	}
	for _, f := range []struct {
		name    string
		v, max  int64
		meaning string
	}{
		{"live_games", q.LiveGames, MaxQuotaLiveGames, "games running at once"},
		{"games_per_minute", q.GamesPerMinute, MaxQuotaGamesPerMinute, "games one account may create a minute, per gateway"},
		{"cpu_seconds_per_hour", q.CpuSecondsPerHour, MaxQuotaCPUSecondsPerHour, "CPU-seconds of simulation in the last hour"},
		{"archive_bytes", q.ArchiveBytes, MaxQuotaArchiveBytes, "bytes of archived game logs kept"},
		{"max_game_duration_s", q.MaxGameDurationS, MaxQuotaGameDurationS, "the longest a game may run, in seconds"},
	} {
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("quotas.%s (%s) must be 0 (unlimited) to %d, got %d", f.name, f.meaning, f.max, f.v)
		}
	}
	return nil
}

func quotasProto(q store.Quotas) *ludusv1.Quotas {
	return &ludusv1.Quotas{LiveGames: q.LiveGames, GamesPerMinute: q.GamesPerMinute, CpuSecondsPerHour: q.CPUSecondsPerHour,
		ArchiveBytes: q.ArchiveBytes, MaxGameDurationS: q.MaxGameDurationS}
}

// tenantByRef finds a tenant by id or slug: NotFound (a Connect error) if none.
func (s *Server) tenantByRef(ctx context.Context, ref string) (store.Tenant, error) {
	if ref == "" || len(ref) > 64 {
		return store.Tenant{}, invalidArg(errors.New("tenant (a tenant's slug or id) must be 1..64 characters"))
	}
	t, err := s.store.TenantByID(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		t, err = s.store.TenantBySlug(ctx, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Tenant{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no tenant with slug or id %q", clip(ref)))
	} else if err != nil {
		return store.Tenant{}, s.internal(ctx, "find tenant", err)
	}
	return t, nil
}

// readerTenant authenticates a read of one tenant's quotas or usage: a tenant
// key (any scope) reads its own tenant (ref empty or naming it), the operator
// key the tenant ref names, or (allowAll and ref empty) every tenant, which
// it returns as the zero Tenant.
func (s *quotaService) readerTenant(ctx context.Context, h http.Header, method, ref string, allowAll bool) (store.Tenant, error) {
	p, err := (&adminService{s.Server}).authenticate(ctx, h)
	if err != nil {
		return store.Tenant{}, err
	}
	if p.operator {
		if ref == "" {
			if allowAll {
				return store.Tenant{}, nil
			}
			return store.Tenant{}, invalidArg(fmt.Errorf("%s with the operator key needs tenant (a tenant's slug or id)", method))
		}
		return s.tenantByRef(ctx, ref)
	}
	if !needRead.allows(p.scope) {
		return store.Tenant{}, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s needs a key with %s; this key has scope %q", method, needRead, p.scope))
	}
	own, err := s.store.TenantByID(ctx, p.tenantID)
	if err != nil {
		return store.Tenant{}, s.internal(ctx, "key's tenant", err)
	}
	if ref != "" && ref != own.ID && ref != own.Slug {
		return store.Tenant{}, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s: a tenant's key reads only its own tenant (%s), not %q", method, own.Slug, clip(ref)))
	}
	return own, nil
}

// SetQuotas replaces a tenant's quotas. Operator only.
func (s *quotaService) SetQuotas(ctx context.Context, req *connect.Request[ludusv1.SetQuotasRequest]) (*connect.Response[ludusv1.SetQuotasResponse], error) {
	p, err := (&adminService{s.Server}).authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if !p.operator {
		return nil, connect.NewError(connect.CodePermissionDenied,
			errors.New("SetQuotas needs the operator key: a tenant's quotas are the operator's to set (a tenant key may read them with GetQuotas)"))
	}
	if err := checkQuotas(req.Msg.Quotas); err != nil {
		return nil, invalidArg(err)
	}
	t, err := s.tenantByRef(ctx, req.Msg.Tenant)
	if err != nil {
		return nil, err
	}
	q := req.Msg.Quotas
	err = s.store.PutQuotas(ctx, store.Quotas{TenantID: t.ID, LiveGames: q.LiveGames, GamesPerMinute: q.GamesPerMinute,
		CPUSecondsPerHour: q.CpuSecondsPerHour, ArchiveBytes: q.ArchiveBytes, MaxGameDurationS: q.MaxGameDurationS, UpdatedAt: s.now().UTC()})
	if err != nil {
		return nil, s.internal(ctx, "put quotas", err)
	}
	s.log.InfoContext(ctx, "backend: quotas set", "tenant", t.ID, "slug", t.Slug, "live_games", q.LiveGames,
		"games_per_minute", q.GamesPerMinute, "cpu_seconds_per_hour", q.CpuSecondsPerHour, "archive_bytes", q.ArchiveBytes,
		"max_game_duration_s", q.MaxGameDurationS)
	return connect.NewResponse(&ludusv1.SetQuotasResponse{TenantId: t.ID, Quotas: q}), nil
}

// GetQuotas returns a tenant's quotas.
func (s *quotaService) GetQuotas(ctx context.Context, req *connect.Request[ludusv1.GetQuotasRequest]) (*connect.Response[ludusv1.GetQuotasResponse], error) {
	t, err := s.readerTenant(ctx, req.Header(), "GetQuotas", req.Msg.Tenant, false)
	if err != nil {
		return nil, err
	}
	q, err := s.store.Quotas(ctx, t.ID)
	if err != nil {
		return nil, s.internal(ctx, "quotas", err)
	}
	out := &ludusv1.GetQuotasResponse{TenantId: t.ID, Quotas: quotasProto(q)}
	if !q.UpdatedAt.IsZero() {
		out.UpdatedAt = timestamppb.New(q.UpdatedAt)
	}
	return connect.NewResponse(out), nil
}

// maxUsageAge is how far back GetUsage reads.
const maxUsageAge = 92 * 24 * time.Hour

// GetUsage returns metered usage per tenant and hour.
func (s *quotaService) GetUsage(ctx context.Context, req *connect.Request[ludusv1.GetUsageRequest]) (*connect.Response[ludusv1.GetUsageResponse], error) {
	t, err := s.readerTenant(ctx, req.Header(), "GetUsage", req.Msg.Tenant, true)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	since := now.Add(-24 * time.Hour)
	if req.Msg.Since != nil {
		if err := req.Msg.Since.CheckValid(); err != nil {
			return nil, invalidArg(fmt.Errorf("since: %v", err))
		}
		since = req.Msg.Since.AsTime()
	}
	if since.Before(now.Add(-maxUsageAge)) {
		return nil, invalidArg(fmt.Errorf("since must be within the last %d days, got %s", int(maxUsageAge/(24*time.Hour)), since.Format(time.RFC3339)))
	}
	recs, err := s.store.Usage(ctx, t.ID, since.Truncate(time.Hour))
	if err != nil {
		return nil, s.internal(ctx, "usage", err)
	}
	slugs := map[string]string{t.ID: t.Slug}
	if t.ID == "" {
		ts, err := s.store.ListTenants(ctx)
		if err != nil {
			return nil, s.internal(ctx, "list tenants", err)
		}
		for _, t := range ts {
			slugs[t.ID] = t.Slug
		}
	}
	out := &ludusv1.GetUsageResponse{Records: make([]*ludusv1.UsageRecord, 0, len(recs))}
	for _, r := range recs {
		out.Records = append(out.Records, &ludusv1.UsageRecord{TenantId: r.TenantID, TenantSlug: slugs[r.TenantID],
			Hour: timestamppb.New(r.Hour), CpuSeconds: float64(r.CPUMicros) / 1e6, PlayerSeconds: float64(r.PlayerMillis) / 1e3,
			StreamBytes: r.StreamBytes, EtcdWrites: r.EtcdWrites, ArchiveBytes: r.ArchiveBytes, GamesTimedOut: r.GamesTimedOut})
	}
	return connect.NewResponse(out), nil
}
