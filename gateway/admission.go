package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// Admission enforces tenants' quotas (docs/OPERATIONS.md, "Quotas and
// usage") when a player creates a game, before anything is placed: live
// games, CPU-seconds of simulation in the last hour, archived bytes, and games
// created per minute per account. Over a quota, CreateGame is
// ResourceExhausted with a message naming the quota, its limit, the current
// value and when it resets (Retry-After in the error metadata when that is a
// wait).
//
// A tenant's quotas and standing (its CPU-seconds of the last hour and its
// archived bytes) come from the backend (QuotaClusterService.GetTenantQuotas)
// and are reused for CacheFor. Live games are counted in etcd (only for a
// tenant with a live_games quota), plus the games this gateway admitted in the
// last two seconds that etcd may not show yet; gateways creating games of one
// tenant at the same moment may overshoot live_games by the creations in
// flight on the others. Games per minute is a token bucket per account on each
// gateway: with N gateways an account may create up to N times its quota.
type Admission struct {
	quotas   ludusv1connect.QuotaClusterServiceClient
	cacheFor time.Duration
	now      func() time.Time
	live     func(ctx context.Context, tenant string) (int, error)

	mu      sync.Mutex
	cache   map[string]cachedStanding // tenant id
	buckets map[string]*createBucket  // tenant id + "/" + account id
	pending map[string]*recentCreates // tenant id
	pruned  time.Time
}

// AdmissionConfig configures an Admission.
type AdmissionConfig struct {
	// Quotas is the backend's QuotaClusterService, called with the cluster
	// token. Required.
	Quotas ludusv1connect.QuotaClusterServiceClient
	// CacheFor is how long a tenant's quotas and standing are reused before
	// the backend is asked again. Default 5 s.
	CacheFor time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// LiveGames counts a tenant's live games. Default: the gateway's view of
	// etcd (games whose status is running, or not written yet).
	LiveGames func(ctx context.Context, tenant string) (int, error)
}

// NewAdmission returns an Admission for Config.Admission.
func NewAdmission(cfg AdmissionConfig) *Admission {
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Admission{quotas: cfg.Quotas, cacheFor: cfg.CacheFor, now: cfg.Now, live: cfg.LiveGames,
		cache: map[string]cachedStanding{}, buckets: map[string]*createBucket{}, pending: map[string]*recentCreates{}}
}

// NewBackendAdmission returns an Admission asking the backend at backendURL
// with the cluster token, with the defaults of AdmissionConfig.
func NewBackendAdmission(hc connect.HTTPClient, backendURL, clusterToken string) *Admission {
	return NewAdmission(AdmissionConfig{Quotas: ludusv1connect.NewQuotaClusterServiceClient(hc, backendURL,
		connect.WithInterceptors(bearer.Token(clusterToken)))})
}

type cachedStanding struct {
	st *ludusv1.GetTenantQuotasResponse
	at time.Time
}

// createBucket is one account's token bucket of game creations.
type createBucket struct {
	tokens float64
	at     time.Time
}

// recentCreates are the games this gateway admitted lately for a tenant:
// base is the live count when the first of them was admitted.
type recentCreates struct {
	base, n int
	since   time.Time
}

// recentFor is how long an admitted game counts on top of etcd's live count.
const recentFor = 2 * time.Second

// Quota names, as the messages and the "limit" label of
// ludus_gateway_limit_rejections_total give them.
const (
	quotaLiveGames = "live_games"
	quotaPerMinute = "games_per_minute"
	quotaCPU       = "cpu_seconds_per_hour"
	quotaArchive   = "archive_bytes"
)

// admit is CreateGame's quota check: nil if the caller's tenant and account
// may create a game now. Without Config.Admission there are no quotas.
func (g *Gateway) admit(ctx context.Context) error {
	a := g.cfg.Admission
	if a == nil {
		return nil
	}
	c := claimsFrom(ctx)
	live := a.live
	if live == nil {
		live = g.liveGames
	}
	quota, err := a.check(ctx, c.TenantID, c.AccountID, live)
	if quota != "" {
		g.metrics.limitRejected.WithLabelValues(c.TenantID, quota).Inc()
		g.log.Info("game creation refused by a quota", "tenant", c.TenantID, "account", c.AccountID, "quota", quota)
	}
	return err
}

// liveGames counts a tenant's games that run or are about to, in etcd.
func (g *Gateway) liveGames(ctx context.Context, tenant string) (int, error) {
	g.metrics.etcdReads.Inc()
	games, err := g.fleet.Games(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, gm := range games {
		if gm.Status.State == clusterstate.StateRunning || gm.Status.State == "" {
			n++
		}
	}
	return n, nil
}

// check decides one creation: the quota refused ("" if none) and the error
// the player gets.
func (a *Admission) check(ctx context.Context, tenant, account string, live func(context.Context, string) (int, error)) (string, error) {
	st, err := a.standing(ctx, tenant)
	if err != nil {
		return "", err
	}
	q := st.GetQuotas()
	if q == nil {
		return "", nil
	}
	name := st.TenantSlug
	if name == "" {
		name = tenant
	}
	if lim := q.CpuSecondsPerHour; lim > 0 && st.CpuSecondsLastHour >= float64(lim) {
		when := "as older usage leaves the hour"
		var retry time.Duration
		if t := st.GetCpuBelowQuotaAt(); t != nil {
			when = "at " + t.AsTime().UTC().Format("15:04 MST") + " if its running games use no more"
			retry = t.AsTime().Sub(a.now())
		}
		return quotaCPU, exhausted(retry, "tenant %s used %.0f CPU-seconds of simulation in the last hour, its limit is %d: new games "+
			"are refused until that falls below the limit (%s); end games or ask the operator to raise %s",
			name, math.Floor(st.CpuSecondsLastHour), lim, when, quotaCPU)
	}
	if lim := q.ArchiveBytes; lim > 0 && st.ArchiveBytes >= lim {
		return quotaArchive, exhausted(0, "tenant %s keeps %d bytes of archived game logs, its limit is %d: new games are refused "+
			"until the operator raises %s (archives are always stored, and the total does not go down by itself)",
			name, st.ArchiveBytes, lim, quotaArchive)
	}
	liveNow := 0
	if q.LiveGames > 0 {
		if liveNow, err = live(ctx, tenant); err != nil {
			if ctx.Err() != nil {
				return "", connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
			}
			return "", connect.NewError(connect.CodeUnavailable, errors.New("the tenant's live games cannot be counted right now; retry in a moment"))
		}
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.prune(now)
	var rc *recentCreates
	if q.LiveGames > 0 {
		rc = a.pending[tenant]
		if rc != nil && now.Sub(rc.since) >= recentFor {
			rc = nil
		}
		effective := liveNow
		if rc != nil {
			effective = max(liveNow, rc.base+rc.n)
		}
		if int64(effective) >= q.LiveGames {
			return quotaLiveGames, exhausted(0, "tenant %s has %d live games, its limit is %d: end a game or ask the operator to raise %s",
				name, effective, q.LiveGames, quotaLiveGames)
		}
	}
	var b *createBucket
	if lim := q.GamesPerMinute; lim > 0 {
		key := tenant + "/" + account
		b = a.buckets[key]
		if b == nil {
			b = &createBucket{tokens: float64(lim), at: now}
			a.buckets[key] = b
		}
		rate := float64(lim) / 60 // tokens a second
		b.tokens = min(float64(lim), b.tokens+now.Sub(b.at).Seconds()*rate)
		b.at = now
		if b.tokens < 1 {
			wait := time.Duration(math.Ceil((1 - b.tokens) / rate * float64(time.Second)))
			return quotaPerMinute, exhausted(wait, "account %s created %d games in the last minute on this gateway, its limit is %d a "+
				"minute (%s, counted by each gateway): retry in %d s", account, lim, lim, quotaPerMinute, retrySeconds(wait))
		}
	}
	// Admitted: take the token, count the game until etcd shows it.
	if b != nil {
		b.tokens--
	}
	if q.LiveGames > 0 {
		if rc == nil {
			rc = &recentCreates{base: liveNow, since: now}
			a.pending[tenant] = rc
		}
		rc.n++
	}
	return "", nil
}

// standing returns a tenant's quotas and standing, cached for cacheFor.
func (a *Admission) standing(ctx context.Context, tenant string) (*ludusv1.GetTenantQuotasResponse, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[tenant]
	a.mu.Unlock()
	if ok && now.Sub(c.at) < a.cacheFor {
		return c.st, nil
	}
	resp, err := a.quotas.GetTenantQuotas(ctx, connect.NewRequest(&ludusv1.GetTenantQuotasRequest{TenantId: tenant}))
	var st *ludusv1.GetTenantQuotasResponse
	switch {
	case err == nil:
		st = resp.Msg
	case connect.CodeOf(err) == connect.CodeUnimplemented, connect.CodeOf(err) == connect.CodeNotFound:
		// A backend without quotas, or a tenant it does not know (the
		// rest of CreateGame says what is wrong): no quotas.
		st = &ludusv1.GetTenantQuotasResponse{}
	case ctx.Err() != nil:
		return nil, connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
	default:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the tenant's quotas cannot be checked right now; retry in a moment"))
	}
	a.mu.Lock()
	a.cache[tenant] = cachedStanding{st: st, at: now}
	a.mu.Unlock()
	return st, nil
}

// prune drops, at most once a minute, what no longer matters: full buckets
// (idle a minute), expired recent creations and stale cache entries.
func (a *Admission) prune(now time.Time) {
	if now.Sub(a.pruned) < time.Minute {
		return
	}
	a.pruned = now
	for k, b := range a.buckets {
		if now.Sub(b.at) >= time.Minute {
			delete(a.buckets, k)
		}
	}
	for k, rc := range a.pending {
		if now.Sub(rc.since) >= recentFor {
			delete(a.pending, k)
		}
	}
	for k, c := range a.cache {
		if now.Sub(c.at) >= a.cacheFor {
			delete(a.cache, k)
		}
	}
}

func retrySeconds(d time.Duration) int64 { return max(1, int64(math.Ceil(d.Seconds()))) }

// exhausted is a quota refusal: ResourceExhausted with the message, and
// Retry-After (whole seconds) when retry is a wait.
func exhausted(retry time.Duration, format string, args ...any) error {
	err := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(format, args...))
	if retry > 0 {
		err.Meta().Set("Retry-After", strconv.FormatInt(retrySeconds(retry), 10))
	}
	return err
}
