package simnode

import (
	"context"
	"time"
)

// scheduler lets at most `workers` games tick at once (GOMAXPROCS by default)
// and, when more are due than can run, chooses the next one fairly by tenant:
// start-time fair queuing on the CPU time each tenant's ticks used, so a tenant
// with fifty matches or one heavy module gets the same share of the node as a
// tenant with one light match, not fifty times more. A tenant may hold at most
// workers-1 slots while other tenants have games on the node, so a tenant whose
// guests burn a whole call deadline each (runaway loops) cannot occupy every
// worker.
//
// Each game stays an actor with its own goroutine and timer (its drift-free
// schedule, its inbox); it asks for a slot when its tick is due and gives it back
// with the tick's cost. One dispatcher goroutine owns every queue — the tick path
// takes no mutex, only channel operations.
//
// Degradation under overload follows from this: a tick that waits for a slot
// starts late, and a late tick skips its views (game.tick), which frees CPU
// before ticks themselves slip further.
type scheduler struct {
	workers int
	// msgs carries every request to the dispatcher through one channel, so the
	// messages of one game arrive in the order it sent them.
	msgs chan schedMsg
	// usage meters each tenant's tick cost for quotas and billing (usage.go):
	// release adds to it, with one atomic add and no lock.
	usage *usageMeter
}

type schedMsg struct {
	t    *ticket
	kind int
}

const (
	msgRegister = iota // a game started
	msgUnregister
	msgAcquire
	msgRelease
)

// ticket is a game's standing place in the scheduler. The game owns it; the
// dispatcher reads tenant and writes nothing but grant.
type ticket struct {
	tenant string
	grant  chan struct{} // buffered 1
	cost   time.Duration // set by the game before release
	ts     *tenantSched  // dispatcher-owned
	use    *tenantUsage  // the tenant's usage meter
}

// tenantSched is the dispatcher's state of one tenant.
type tenantSched struct {
	name     string
	games    int
	inFlight int
	waiting  []*ticket
	vtime    time.Duration // CPU time used, advanced to the system's on becoming active
}

func newScheduler(workers int) *scheduler {
	return &scheduler{
		workers: max(workers, 1),
		msgs:    make(chan schedMsg, 1024),
		usage:   newUsageMeter(),
	}
}

func (s *scheduler) newTicket(tenant string) *ticket {
	return &ticket{tenant: tenant, grant: make(chan struct{}, 1), use: s.usage.tenant(tenant)}
}

// register and unregister count a tenant's games, which decides whether the
// per-tenant cap applies (a node serving one tenant uses every worker for it).
func (s *scheduler) register(ctx context.Context, t *ticket) { s.send(ctx, t, msgRegister) }

func (s *scheduler) unregister(ctx context.Context, t *ticket) { s.send(ctx, t, msgUnregister) }

func (s *scheduler) send(ctx context.Context, t *ticket, kind int) bool {
	select {
	case s.msgs <- schedMsg{t: t, kind: kind}:
		return true
	case <-ctx.Done():
		return false
	}
}

// acquire waits for a slot. It returns false if the node shut down (the caller
// then runs without a slot: it is about to stop anyway).
func (s *scheduler) acquire(ctx context.Context, t *ticket) bool {
	if !s.send(ctx, t, msgAcquire) {
		return false
	}
	select {
	case <-t.grant:
		return true
	case <-ctx.Done():
		return false
	}
}

// release returns the slot and charges cost to the ticket's tenant, in the
// fair queue and in the tenant's metered usage.
func (s *scheduler) release(ctx context.Context, t *ticket, cost time.Duration) {
	t.cost = cost
	t.use.addCPU(cost)
	s.send(ctx, t, msgRelease)
}

// run is the dispatcher.
func (s *scheduler) run(ctx context.Context) {
	tenants := map[string]*tenantSched{}
	var active []*tenantSched // tenants with waiting tickets
	var sysV time.Duration    // virtual time of the last dispatch
	free := s.workers
	nTenants := 0 // tenants with games
	get := func(t *ticket) *tenantSched {
		if t.ts == nil {
			ts := tenants[t.tenant]
			if ts == nil {
				ts = &tenantSched{name: t.tenant}
				tenants[t.tenant] = ts
			}
			t.ts = ts
		}
		return t.ts
	}
	tenantCap := max(s.workers-1, 1)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-s.msgs:
			ts := get(m.t)
			switch m.kind {
			case msgRegister:
				if ts.games == 0 {
					nTenants++
				}
				ts.games++
			case msgUnregister:
				ts.games--
				if ts.games == 0 {
					nTenants--
				}
			case msgAcquire:
				if len(ts.waiting) == 0 {
					ts.vtime = max(ts.vtime, sysV)
					active = append(active, ts)
				}
				ts.waiting = append(ts.waiting, m.t)
			case msgRelease:
				free++
				ts.inFlight--
				ts.vtime += m.t.cost
			}
			if ts.games == 0 && ts.inFlight == 0 && len(ts.waiting) == 0 {
				delete(tenants, ts.name)
			}
		}
		// Dispatch: the eligible waiting tenant that used the least CPU goes first.
		for free > 0 && len(active) > 0 {
			best := -1
			for i, ts := range active {
				if nTenants > 1 && ts.inFlight >= tenantCap {
					continue
				}
				if best < 0 || ts.vtime < active[best].vtime {
					best = i
				}
			}
			if best < 0 {
				break // every waiting tenant is at its cap
			}
			ts := active[best]
			t := ts.waiting[0]
			ts.waiting[0] = nil
			ts.waiting = ts.waiting[1:]
			if len(ts.waiting) == 0 {
				active[best] = active[len(active)-1]
				active[len(active)-1] = nil
				active = active[:len(active)-1]
				ts.waiting = nil
			}
			sysV = ts.vtime
			ts.inFlight++
			free--
			t.grant <- struct{}{}
		}
	}
}
