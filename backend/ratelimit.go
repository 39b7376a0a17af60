package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
)

// RateLimit is a token bucket: PerMinute tokens a minute, holding at most
// Burst. The zero value means "the default"; NoLimit turns a limit off.
type RateLimit struct {
	PerMinute float64
	// Burst is the bucket's size: how many may happen at once after a quiet
	// spell. Zero or less means PerMinute (at least 1).
	Burst int
}

// NoLimit is a RateLimit that never refuses.
var NoLimit = RateLimit{PerMinute: -1}

// Sign-up limits (Config.SignupsPerAddress and SignupsPerTenant).
var (
	// DefaultSignupsPerAddress: 20 new accounts a minute from one address
	// (IPv6: one /64), 100 at once. The burst leaves room for a classroom or
	// an office behind one address, and for the e2e suite, which signs
	// about 60 guests in from 127.0.0.1 within a few minutes.
	DefaultSignupsPerAddress = RateLimit{PerMinute: 20, Burst: 100}
	// DefaultSignupsPerTenant: 600 new accounts a minute per tenant (10/s),
	// 600 at once.
	DefaultSignupsPerTenant = RateLimit{PerMinute: 600, Burst: 600}
)

// DefaultSignInsPerAccount (Config.SignInsPerAccount): 10 sign-ins a minute
// to one existing account, 20 at once. A player signs in when a game
// starts and refreshes after that; each sign-in starts a session that is
// stored for RefreshTTL, so a client that signs in over and over (a bug,
// a loop) would fill the refresh-token table.
var DefaultSignInsPerAccount = RateLimit{PerMinute: 10, Burst: 20}

// DefaultLeaderboardReadsPerAccount (Config.LeaderboardReadsPerAccount): 60
// GetLeaderboard calls a minute per player, 20 at once. A page shows a board
// when asked; a board read around the caller counts every entry above it, so
// its cost grows with the rank, and a loop of them would be the database's.
var DefaultLeaderboardReadsPerAccount = RateLimit{PerMinute: 60, Burst: 20}

// maxBuckets bounds a limiter's memory: past it, buckets that are full again
// (worth nothing) are dropped, and if that is not enough, all of them.
const maxBuckets = 100_000

// limiter is a set of token buckets by key.
type limiter struct {
	rate  float64 // tokens per second
	burst float64

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed
}

// newLimiter returns a limiter for l (def if l is zero), or nil if it is off.
func newLimiter(l, def RateLimit) *limiter {
	if l == (RateLimit{}) {
		l = def
	}
	if l.PerMinute < 0 || math.IsNaN(l.PerMinute) || math.IsInf(l.PerMinute, 0) {
		return nil
	}
	if l.Burst <= 0 {
		l.Burst = max(1, int(l.PerMinute))
	}
	return &limiter{rate: l.PerMinute / 60, burst: float64(l.Burst), buckets: map[string]*bucket{}}
}

// refill returns b's tokens at now.
func (l *limiter) refill(b *bucket, now time.Time) float64 {
	if d := now.Sub(b.at).Seconds(); d > 0 {
		return min(l.burst, b.tokens+d*l.rate)
	}
	return b.tokens
}

// take takes a token of key at now. If there is none it takes nothing and
// returns how long until there is one.
func (l *limiter) take(key string, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets || now.Sub(l.lastSweep) > time.Minute {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens, b.at = l.refill(b, now), now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, l.until(b.tokens)
}

// until is how long a bucket holding tokens (fewer than one) takes to hold one.
func (l *limiter) until(tokens float64) time.Duration {
	if l.rate <= 0 {
		return time.Hour
	}
	return time.Duration((1 - tokens) / l.rate * float64(time.Second))
}

// ready reports whether key has a token at now, taking none; if not, how
// long until it has one. For a cost that is known only after the work
// (ready before, take after): calls running at once may each pass, so a
// key overdraws by at most its concurrent calls.
func (l *limiter) ready(key string, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		return true, 0
	}
	if tokens := l.refill(b, now); tokens < 1 {
		return false, l.until(tokens)
	}
	return true, 0
}

// give returns a token taken for something that did not happen.
func (l *limiter) give(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		b.tokens, b.at = min(l.burst, l.refill(b, now)+1), now
	}
}

// sweep drops full buckets (a full bucket is the same as none); if too
// many remain, it drops them all rather than grow without bound. Called with
// l.mu held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, b := range l.buckets {
		if l.refill(b, now) >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// clientAddr is the address of the client of a call: the peer, or if the
// peer is a trusted proxy, the last address in X-Forwarded-For that is not
// one (proxies append the address they received the request from, so
// addresses left of the first untrusted one may be forged).
func (s *Server) clientAddr(peer string, h http.Header) netip.Addr {
	addr := parseAddr(peer)
	if !s.trustedProxy(addr) {
		return addr
	}
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseAddr(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break // garbage: what lies beyond it cannot be trusted either
		}
		addr = a
		if !s.trustedProxy(a) {
			break
		}
	}
	return addr
}

// parseAddr parses "ip", "ip:port" or "[ipv6]:port"; the zero Addr if none.
func parseAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap()
	}
	return netip.Addr{}
}

func (s *Server) trustedProxy(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addrKey is an address's bucket: IPv4 addresses alone, IPv6 by /64 (what
// one subscriber gets).
func addrKey(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is6():
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}

// signup is a reserved account creation: tokens taken from the address's
// and the tenant's buckets. release gives them back when no account was
// created after all.
type signup struct {
	s            *Server
	addr, tenant string // keys; empty: not charged
	released     bool
}

func (r *signup) release() {
	if r == nil || r.released {
		return
	}
	r.released = true
	now := r.s.now()
	if r.addr != "" {
		r.s.signupsByAddr.give(r.addr, now)
	}
	if r.tenant != "" {
		r.s.signupsByTen.give(r.tenant, now)
	}
}

// reserveSignup takes a token for creating an account in tenantID: from the
// caller's address's bucket (unless peer is empty: calls authenticated by a
// tenant's API key, whose address is the studio's own server) and the
// tenant's. ResourceExhausted with a retry hint if either is empty.
func (s *Server) reserveSignup(tenantID, peer string, h http.Header) (*signup, error) {
	now := s.now()
	r := &signup{s: s}
	if peer != "" && s.signupsByAddr != nil {
		key := addrKey(s.clientAddr(peer, h))
		if ok, wait := s.signupsByAddr.take(key, now); !ok {
			return nil, tooManySignups("from your network address", wait)
		}
		r.addr = key
	}
	if s.signupsByTen != nil {
		if ok, wait := s.signupsByTen.take(tenantID, now); !ok {
			r.release()
			return nil, tooManySignups("in this game right now", wait)
		}
		r.tenant = tenantID
	}
	return r, nil
}

// tooManySignups is the answer of a throttled account creation: its
// message says when to retry (tooMany).
func tooManySignups(where string, wait time.Duration) error {
	secs := retrySecs(wait)
	return tooMany(secs, "too many new accounts %s: retry in %d s (signing in to an existing account does not count)", where, secs)
}

// retrySecs is a wait in whole seconds, at least one: what a refusal names.
func retrySecs(wait time.Duration) int { return max(1, int(math.Ceil(wait.Seconds()))) }

// tooMany is a throttled call's answer: ResourceExhausted with the message
// (which names the wait), and the "Retry-After" metadata (an HTTP header for
// Connect and gRPC-Web, trailer metadata for gRPC) giving secs.
func tooMany(secs int, format string, args ...any) error {
	err := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(format, args...))
	err.Meta().Set("Retry-After", strconv.Itoa(secs))
	return err
}

// guestSignupGate decides whether a GuestLogin may go ahead: with a
// reserved sign-up, or, when sign-ups are exhausted, only if the device
// already has an account (existing accounts are never throttled).
func (s *Server) guestSignupGate(ctx context.Context, tenantID, deviceID, peer string, h http.Header) (*signup, error) {
	r, err := s.reserveSignup(tenantID, peer, h)
	if err == nil {
		return r, nil
	}
	if _, lerr := s.store.AccountByDevice(ctx, tenantID, deviceID); lerr == nil {
		return nil, nil
	} else if !errors.Is(lerr, store.ErrNotFound) {
		return nil, s.internal(ctx, "guest login", lerr)
	}
	return nil, err
}

// signInKey is the sign-in limit's bucket of an account: its tenant and
// the identity it signs in with (a device, an email, a custom id), known
// before the store is asked which account that is.
func signInKey(tenantID, kind, identity string) string {
	return tenantID + "\x00" + kind + "\x00" + identity
}

// signInReady refuses a sign-in to an existing account whose bucket is
// empty: ResourceExhausted, with the wait in the message and Retry-After.
func (s *Server) signInReady(key string) error {
	if s.signIns == nil {
		return nil
	}
	ok, wait := s.signIns.ready(key, s.now())
	if ok {
		return nil
	}
	secs := retrySecs(wait)
	return tooMany(secs, "too many sign-ins to this account: retry in %d s (a session lasts %d days: keep its refresh token and call Refresh rather than signing in again)",
		secs, int(RefreshTTL.Hours()/24))
}

// signedIn charges a sign-in to an existing account (one that started a
// session) to its bucket.
func (s *Server) signedIn(key string) {
	if s.signIns != nil {
		s.signIns.take(key, s.now())
	}
}

// leaderboardReadAllowed takes a token of the account's leaderboard reads, or
// refuses with ResourceExhausted, the wait in the message and Retry-After.
func (s *Server) leaderboardReadAllowed(tenantID, accountID string) error {
	if s.boardReads == nil {
		return nil
	}
	ok, wait := s.boardReads.take(tenantID+"\x00"+accountID, s.now())
	if ok {
		return nil
	}
	secs := retrySecs(wait)
	return tooMany(secs, "too many leaderboard reads by this account: retry in %d s", secs)
}
