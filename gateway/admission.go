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
// usage") on every new game, before anything is placed: live games, CPU-seconds
// of simulation in the last hour, archived bytes, and (for CreateGame) games
// created per minute per account. Over a quota, CreateGame is
// ResourceExhausted with a message naming the quota, its limit, the current
// value and when it resets (Retry-After in the error metadata when that is a
// wait); a matched game is not started and the allocation fails with that
// error.
//
// A tenant's quotas and standing (its CPU-seconds of the last hour and its
// archived bytes) come from the backend (QuotaClusterService.GetTenantQuotas)
// and are reused for CacheFor. Live games are counted in etcd (only for a
// tenant with a live_games quota), plus each game this gateway admitted that
// etcd does not list yet: a game counts from its admission while it is being
// placed (a node claims it in etcd only after loading, compiling and
// initializing its module), and after, until etcd lists it or for
// pendingAfterPlacement. Gateways creating games of one tenant at the same
// moment may overshoot live_games by the creations in flight on the others.
// Games per minute is a token bucket per account on each gateway: with N
// gateways an account may create up to N times its quota.
type Admission struct {
	quotas   ludusv1connect.QuotaClusterServiceClient
	cacheFor time.Duration
	now      func() time.Time
	live     func(ctx context.Context, tenant string) (map[string]bool, error)

	mu      sync.Mutex
	cache   map[string]cachedStanding           // tenant id
	buckets map[string]*createBucket            // tenant id + "/" + account id
	pending map[string]map[string]*admittedGame // tenant id, game id
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
	// LiveGames lists a tenant's games that etcd holds, by game id, each
	// true if it is live (running, or its status not written yet) and false
	// if it is over. Default: the gateway's read of etcd.
	LiveGames func(ctx context.Context, tenant string) (map[string]bool, error)
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
		cache: map[string]cachedStanding{}, buckets: map[string]*createBucket{}, pending: map[string]map[string]*admittedGame{}}
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

// admittedGame is a game this gateway admitted for a tenant with a
// live_games quota, counted on top of etcd's live games until etcd lists it.
type admittedGame struct {
	admitted time.Time
	// ended is when its placement ended (zero while it is being placed).
	ended time.Time
	// listed is when the first etcd read that listed it started: a read
	// started later that does not list it finds it gone (ended and its keys
	// deleted), while one started earlier may simply predate the claim.
	listed time.Time
}

// startOutcome is how a game's placement ended, for its admission.
type startOutcome int

const (
	// gameNotStarted: no node started it (refused, or nothing was placed); it
	// stops counting at once.
	gameNotStarted startOutcome = iota
	// gameStarted: a node claimed it, so etcd lists it from now on.
	gameStarted
	// gameMaybeStarted: a node's call timed out or broke off, and etcd did not
	// list the game after: the node may still claim it (it stops at its
	// next check of the cancelled call), so it counts for
	// pendingAfterPlacement.
	gameMaybeStarted
)

// pendingAfterPlacement is how long a game whose placement ended, started or
// maybe started, counts on top of etcd's live games while etcd does not list
// it: a started game is listed by the next read (its node claimed it before
// answering), so this is for a claim that lands after its call was given up,
// and bounds what a gateway remembers.
const pendingAfterPlacement = 30 * time.Second

// maxPlacing bounds how long a game counts while it is being placed (a
// placement tries one node at a time, each for nodeCallTimeout, within its
// caller's deadline): only a placement that never reported its end, a bug,
// reaches it.
const maxPlacing = 10 * time.Minute

// Quota names, as the messages and the "limit" label of
// ludus_gateway_limit_rejections_total give them.
const (
	quotaLiveGames = "live_games"
	quotaPerMinute = "games_per_minute"
	quotaCPU       = "cpu_seconds_per_hour"
	quotaArchive   = "archive_bytes"
)

// admit is the quota check of a new game, gameID, before anything of it is
// placed: for CreateGame with the caller's account, which games_per_minute
// charges, or with account "" for a game the matchmaker formed (no account
// asked for it, and each player's searches have their own rate). On nil it
// returns the func to call, once, when the game's placement has ended, with
// its outcome. Without Config.Admission there are no quotas.
func (g *Gateway) admit(ctx context.Context, tenant, account, gameID string) (func(startOutcome), error) {
	a := g.cfg.Admission
	if a == nil {
		return func(startOutcome) {}, nil
	}
	live := a.live
	if live == nil {
		live = g.liveGames
	}
	quota, err := a.check(ctx, tenant, account, gameID, live)
	if quota != "" {
		g.metrics.limitRejected.WithLabelValues(tenant, quota).Inc()
		// A matched game's refusal is logged by the matchmaker, with the
		// allocation's error (the quota's message).
		if account != "" {
			g.log.Info("game creation refused by a quota", "tenant", tenant, "account", account, "quota", quota)
		}
	}
	if err != nil {
		return nil, err
	}
	return func(o startOutcome) { a.placed(tenant, gameID, o) }, nil
}

// liveGames lists a tenant's games in etcd: true for those that run or are
// about to (status not written yet), false for those that are over.
func (g *Gateway) liveGames(ctx context.Context, tenant string) (map[string]bool, error) {
	g.metrics.etcdReads.Inc()
	games, err := g.fleet.Games(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(games))
	for _, gm := range games {
		out[gm.Spec.GameID] = gm.Status.State == clusterstate.StateRunning || gm.Status.State == ""
	}
	return out, nil
}

// check decides one new game: the quota refused ("" if none) and the error
// the caller gets. Admitted under a live_games quota, the game counts until
// etcd lists it (placed reports the end of its placement).
func (a *Admission) check(ctx context.Context, tenant, account, gameID string, live func(context.Context, string) (map[string]bool, error)) (string, error) {
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
	var games map[string]bool
	var readAt time.Time
	if q.LiveGames > 0 {
		readAt = a.now()
		if games, err = live(ctx, tenant); err != nil {
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
	if q.LiveGames > 0 {
		n := a.unlisted(tenant, games, readAt, now)
		for _, live := range games {
			if live {
				n++
			}
		}
		if int64(n) >= q.LiveGames {
			return quotaLiveGames, exhausted(0, "tenant %s has %d live games, its limit is %d: end a game or ask the operator to raise %s",
				name, n, q.LiveGames, quotaLiveGames)
		}
	}
	var b *createBucket
	if lim := q.GamesPerMinute; lim > 0 && account != "" {
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
	// Admitted: take the token, count the game until etcd lists it.
	if b != nil {
		b.tokens--
	}
	if q.LiveGames > 0 {
		m := a.pending[tenant]
		if m == nil {
			m = map[string]*admittedGame{}
			a.pending[tenant] = m
		}
		m[gameID] = &admittedGame{admitted: now}
	}
	return "", nil
}

// unlisted counts the tenant's admitted games that may be live and that
// etcd's read, started at readAt, did not list (games), and forgets those
// that no longer count. a.mu is held.
func (a *Admission) unlisted(tenant string, games map[string]bool, readAt, now time.Time) int {
	m := a.pending[tenant]
	n := 0
	for id, ag := range m {
		if ag.expired(now) {
			delete(m, id)
			continue
		}
		if _, ok := games[id]; ok {
			// etcd counts it now (or knows it is over). Reads are
			// linearizable: every read started after this one lists it too.
			if ag.listed.IsZero() || readAt.Before(ag.listed) {
				ag.listed = readAt
			}
			continue
		}
		if !ag.listed.IsZero() && readAt.After(ag.listed) {
			continue // listed by an earlier read and gone since: it is over
		}
		n++
	}
	if len(m) == 0 {
		delete(a.pending, tenant)
	}
	return n
}

// expired reports whether an admitted game no longer counts, listed or not.
func (ag *admittedGame) expired(now time.Time) bool {
	if ag.ended.IsZero() {
		return now.Sub(ag.admitted) >= maxPlacing
	}
	return now.Sub(ag.ended) >= pendingAfterPlacement
}

// placed records how an admitted game's placement ended.
func (a *Admission) placed(tenant, gameID string, o startOutcome) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.pending[tenant]
	ag := m[gameID]
	if ag == nil {
		return // no live_games quota when it was admitted, or expired
	}
	if o == gameNotStarted {
		delete(m, gameID)
		if len(m) == 0 {
			delete(a.pending, tenant)
		}
		return
	}
	ag.ended = now
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
// (idle a minute), admitted games that no longer count and stale cache entries.
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
	for tenant, m := range a.pending {
		for id, ag := range m {
			if ag.expired(now) {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(a.pending, tenant)
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
