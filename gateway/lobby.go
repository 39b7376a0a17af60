package gateway

import (
	"context"
	"sync"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// The lobby's game list (ListGames) is three prefix reads of etcd covering
// every game the tenant has there, and every open lobby asks for it every few
// seconds. etcd is shared by every game of the cluster, so the gateway bounds
// what lobbies cost it:
//   - Calls for one tenant share reads. A call waits for the read in
//     progress, if any, to end, then shares the next read with every call
//     that arrived meanwhile. So each answer comes from a read that started
//     after its call did (a player who just joined a game sees it counted),
//     and etcd sees at most one read per tenant per gateway at a time,
//     however many lobbies poll.
//   - The answer lists the newest MaxListedGames running games: a tenant with
//     thousands of games sends each lobby a page, not all of them.

// MaxListedGames is how many running games ListGames returns, newest first.
const MaxListedGames = 200

// lobbyReadTimeout bounds a shared read, which runs for several callers
// whatever their contexts.
const lobbyReadTimeout = 10 * time.Second

// lobbyReads coalesces the game-list reads of each tenant.
type lobbyReads struct {
	read func(ctx context.Context, tenant string) ([]clusterstate.Game, error)

	mu      sync.Mutex
	tenants map[string]*tenantReads
}

// tenantReads is one tenant's read in progress and the read that follows it.
type tenantReads struct {
	running *lobbyRead
	next    *lobbyRead // started when running ends; calls arriving now share it
}

type lobbyRead struct {
	done    chan struct{}
	games   []clusterstate.Game
	err     error
	waiters int // calls sharing it (tests)
}

func newLobbyReads(read func(ctx context.Context, tenant string) ([]clusterstate.Game, error)) *lobbyReads {
	return &lobbyReads{read: read, tenants: map[string]*tenantReads{}}
}

// games returns tenant's games from a read that started after the call.
// The slice is shared with other callers: read only.
func (l *lobbyReads) games(ctx context.Context, tenant string) ([]clusterstate.Game, error) {
	l.mu.Lock()
	t := l.tenants[tenant]
	if t == nil {
		// No read in progress: this call reads, alone, with its own context.
		t = &tenantReads{running: &lobbyRead{done: make(chan struct{})}}
		l.tenants[tenant] = t
		r := t.running
		l.mu.Unlock()
		r.games, r.err = l.read(ctx, tenant)
		l.finish(tenant, r)
		return r.games, r.err
	}
	if t.next == nil {
		t.next = &lobbyRead{done: make(chan struct{})}
	}
	r := t.next
	r.waiters++
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.games, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// finish ends read r of tenant and starts the read that waited for it.
func (l *lobbyReads) finish(tenant string, r *lobbyRead) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(r.done)
	t := l.tenants[tenant]
	if t.next == nil {
		delete(l.tenants, tenant)
		return
	}
	next := t.next
	t.running, t.next = next, nil
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), lobbyReadTimeout)
		next.games, next.err = l.read(ctx, tenant)
		cancel()
		l.finish(tenant, next)
	}()
}

// sharing reports how many calls wait for tenant's next read (tests).
func (l *lobbyReads) sharing(tenant string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.tenants[tenant]; t != nil && t.next != nil {
		return t.next.waiters
	}
	return 0
}
