package matchmaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/internal/utf8cut"
	"ludus.dev/ludus/matchmaking"
)

// campaign runs for a queue's leadership until ctx ends (the queue's rules
// were deleted, or the replica closes), leading whenever it wins.
func (m *Matchmaker) campaign(ctx context.Context, tenant, mode string) {
	name := clusterstate.MatchElection(tenant, mode)
	for ctx.Err() == nil {
		lease := m.currentLease()
		l, err := m.state.Campaign(ctx, lease, name, m.ID())
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		m.log.Info("leading matchmaking queue", "tenant", tenant, "mode", mode)
		m.lead(ctx, l, lease, tenant, mode)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = l.Resign(rctx)
		cancel()
	}
}

// leader is one term of leading a queue.
type leader struct {
	m            *Matchmaker
	l            *clusterstate.Leadership
	lease        *clusterstate.Lease // the one l campaigned with
	tenant, mode string

	// The queue size last published for the other replicas' searches
	// (clusterstate.PutQueueSize; -1 for none, or a publication that
	// failed), and when; publishing is set while a publication is in
	// flight.
	published   atomic.Int64
	publishedAt time.Time // used by the lead goroutine only
	publishing  atomic.Bool

	mu sync.Mutex
	// queue is the queue as a watch of its tickets reports it (each ticket
	// decoded once, when it is queued), current up to rev; rev is 0 until
	// the watch has read the queue.
	queue map[string]*queuedTicket
	rev   int64
	// inflight holds the tickets of matches being allocated (0) or settled
	// at a revision: they are left out of Form until the queue, seen at
	// that revision or later, no longer has them.
	inflight map[string]int64
	// stale holds tickets left out of Form because a player of theirs is in
	// a ticket queued after them (a higher etcd revision): that one is the
	// player's search now (a search key allows one at a time), and the old
	// one is left over from a search whose deletion did not reach etcd. It
	// leaves the queue by its owner's retry, its lease, or
	// DropDeadPartyTicket; until then it must not cancel the new search or
	// be matched.
	stale map[string]struct{}
	// failing holds tickets whose match could not be allocated (no node
	// of the region, a module that refuses the match's bots, a quota): they
	// are left out of Form until their backoff ends, so that a failure
	// that repeats does not start work at every scan, and a ticket past
	// MaxWait that is still failing times out, as one that found no match.
	failing    map[string]allocFailure
	allocating int
	wg         sync.WaitGroup
}

// allocFailure is a ticket's record of failed allocations.
type allocFailure struct {
	n     int       // failures in a row
	until time.Time // left out of Form until then
	// quota is the last failure's message when it was the tenant's quota
	// (ResourceExhausted: "tenant … has 20 live games, its limit is 20…"),
	// which the players are told if they time out; other failures are
	// the operator's to read in the log.
	quota string
}

// allocBackoff is how long a ticket sits out after its n-th failed
// allocation in a row: 250 ms, doubling, at most 4 s.
func allocBackoff(n int) time.Duration {
	return min(250*time.Millisecond<<min(n-1, 4), 4*time.Second)
}

// queuedTicket is a ticket of the queue, as stored and as Form takes it.
type queuedTicket struct {
	t  clusterstate.QueuedTicket
	mt matchmaking.Ticket
}

func newQueuedTicket(t clusterstate.QueuedTicket) *queuedTicket {
	mt := matchmaking.Ticket{ID: t.ID, Tenant: t.Tenant, Mode: t.Mode, EnqueuedAt: t.Enqueued,
		Party: make([]matchmaking.Member, 0, len(t.Members))}
	for _, mem := range t.Members {
		mt.Party = append(mt.Party, matchmaking.Member{AccountID: mem.AccountID, Rating: mem.Rating, RTT: mem.RTT})
	}
	return &queuedTicket{t: t, mt: mt}
}

// lead forms the queue's matches every Interval until the leadership is
// lost or ctx ends.
func (m *Matchmaker) lead(ctx context.Context, l *clusterstate.Leadership, lease *clusterstate.Lease, tenant, mode string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	ld := &leader{m: m, l: l, lease: lease, tenant: tenant, mode: mode,
		queue: map[string]*queuedTicket{}, inflight: map[string]int64{}, stale: map[string]struct{}{},
		failing: map[string]allocFailure{}}
	ld.published.Store(-1)
	defer ld.wg.Wait()
	m.setLeader(tenant, mode, ld)
	defer m.setLeader(tenant, mode, nil)
	ld.wg.Add(1)
	go func() { defer ld.wg.Done(); m.state.WatchQueue(ctx, tenant, mode, ld.apply) }()
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		if err := ld.scan(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("matchmaking scan failed", "tenant", tenant, "mode", mode, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// size returns the queue's ticket count as the leader's watch reports it;
// ok is false until the watch has read the queue.
func (ld *leader) size() (n int, ok bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.queue), ld.rev != 0
}

// publishSize publishes the queue's size for the other replicas' searches
// when it changed, at most once a second (their searches read it that
// often), in the background: a write waiting behind others must not hold
// up forming matches. The count is etcd's, so it goes by etcd's clock.
func (ld *leader) publishSize(ctx context.Context, n int) {
	if int64(n) == ld.published.Load() || time.Since(ld.publishedAt) < time.Second || !ld.publishing.CompareAndSwap(false, true) {
		return
	}
	ld.published.Store(int64(n))
	ld.publishedAt = time.Now()
	ld.wg.Go(func() {
		defer ld.publishing.Store(false)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := ld.m.state.PutQueueSize(pctx, ld.l, ld.lease, ld.tenant, ld.mode, n); err != nil {
			ld.published.Store(-1) // try again, even if the size stays
			if ctx.Err() == nil {
				ld.m.log.Info("cannot publish the queue size", "tenant", ld.tenant, "mode", ld.mode, "err", err)
			}
		}
	})
}

// apply updates the leader's view of the queue with a change from its watch.
func (ld *leader) apply(ch clusterstate.QueueChange) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ch.Reset {
		clear(ld.queue)
		clear(ld.stale)
		clear(ld.failing)
		ld.rev = 0
	}
	for _, t := range ch.Put {
		ld.queue[t.ID] = newQueuedTicket(t)
	}
	for _, id := range ch.Deleted {
		delete(ld.queue, id)
		delete(ld.stale, id)
		delete(ld.failing, id)
	}
	ld.rev = max(ld.rev, ch.Rev)
}

// scan runs Form on the queue as seen now and acts on its result.
func (ld *leader) scan(ctx context.Context) error {
	m := ld.m
	qr, ok := m.watchedRules(ld.tenant, ld.mode)
	if !ok {
		return nil // the queue is closing; WatchMatchQueues stops the campaign
	}
	if qr.err != nil {
		return qr.err
	}
	rules := qr.rules
	now := m.cfg.Now()
	ld.mu.Lock()
	if ld.rev == 0 {
		ld.mu.Unlock()
		return nil // the queue is not read yet
	}
	byID := make(map[string]clusterstate.QueuedTicket, len(ld.queue))
	tickets := make([]matchmaking.Ticket, 0, len(ld.queue))
	var failedOut []failedTicket // past MaxWait, their last allocation failed
	for id, q := range ld.queue {
		if _, busy := ld.inflight[id]; busy {
			continue
		}
		if _, old := ld.stale[id]; old {
			continue
		}
		if f, ok := ld.failing[id]; ok {
			if now.Sub(q.t.Enqueued) >= rules.MaxWait {
				failedOut = append(failedOut, failedTicket{q.t, f.quota})
				ld.inflight[id] = 0 // until its settlement is done
				continue
			}
			if now.Before(f.until) {
				continue
			}
		}
		byID[id] = q.t
		tickets = append(tickets, q.mt)
	}
	for id, rev := range ld.inflight {
		if _, present := ld.queue[id]; rev != 0 && rev <= ld.rev && !present {
			delete(ld.inflight, id)
		}
	}
	size := len(ld.queue)
	ld.mu.Unlock()
	ld.publishSize(ctx, size)
	if len(failedOut) > 0 {
		ld.timeOutFailing(ctx, rules, failedOut)
	}
	if len(tickets) == 0 {
		return nil
	}
	res, err := matchmaking.Form(now, tickets, rules)
	if err != nil {
		return err
	}
	// Tickets left over from earlier searches of their players first: no
	// match of this scan may take one.
	var wg sync.WaitGroup
	var stale map[string]bool
	for _, r := range res.Rejected {
		var qe *matchmaking.QueuedElsewhereError
		if errors.As(r.Err, &qe) {
			if stale == nil {
				stale = map[string]bool{}
			}
			stale[ld.leaveOut(ctx, &wg, byID[qe.Ticket], byID[qe.Other], qe.Account)] = true
		}
	}
matches:
	for _, match := range res.Matches {
		for _, id := range match.Tickets {
			if stale[id] {
				continue matches // its other tickets form again at the next scan
			}
		}
		if !ld.startAllocation(ctx, rules, match, byID) {
			break // at MaxAllocating: the rest wait for a later scan
		}
	}
	// Timed-out and rejected tickets leave the queue with their reason, all
	// at once (their settlements are committed together).
	for _, id := range res.TimedOut {
		wg.Go(func() {
			ld.settleAlone(ctx, byID[id], outcome{Ticket: id,
				TimedOut: "no match within " + rules.MaxWait.String() + "; queue again or try another mode"})
		})
	}
	for _, r := range res.Rejected {
		if errors.Is(r.Err, matchmaking.ErrAlreadyQueued) {
			continue // left out above
		}
		wg.Go(func() { ld.settleAlone(ctx, byID[r.TicketID], outcome{Ticket: r.TicketID, Cancelled: r.Err.Error()}) })
	}
	wg.Wait()
	return nil
}

// leaveOut settles a conflict between two tickets that share account: the
// one queued first in etcd is stale (the account's search key allows one
// search at a time, so the other was queued after its search ended), and
// is left out of Form from now on, and deleted if it is a party ticket
// whose party has changed since. The newer ticket is not cancelled: it
// forms at the next scan. Form kept the one it saw as older by the
// replicas' clocks; etcd's revisions decide. It returns the stale ticket's id.
func (ld *leader) leaveOut(ctx context.Context, wg *sync.WaitGroup, rejected, kept clusterstate.QueuedTicket, account string) string {
	old := kept
	if rejected.Rev < kept.Rev {
		old = rejected
	}
	ld.mu.Lock()
	_, known := ld.stale[old.ID]
	if _, queued := ld.queue[old.ID]; queued {
		ld.stale[old.ID] = struct{}{}
	}
	ld.mu.Unlock()
	if known {
		return old.ID
	}
	ld.m.log.Info("ticket left out: its player searches again in a newer ticket", "tenant", ld.tenant, "mode", ld.mode,
		"ticket", old.ID, "account", account)
	wg.Go(func() {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := ld.m.state.DropDeadPartyTicket(dctx, old); err != nil && ctx.Err() == nil {
			ld.m.log.Info("cannot drop a stale party ticket; it stays left out", "tenant", ld.tenant, "mode", ld.mode, "ticket", old.ID, "err", err)
		}
	})
	return old.ID
}

// failedTicket is a ticket timed out because its matches could not be
// allocated, and the quota that refused the last one, if it was one.
type failedTicket struct {
	t     clusterstate.QueuedTicket
	quota string
}

// timeOutFailing settles tickets past MaxWait whose matches could not be
// allocated as timed out, in the background, and saying so; their players
// may search again.
func (ld *leader) timeOutFailing(ctx context.Context, rules matchmaking.Rules, fs []failedTicket) {
	for _, f := range fs {
		t := f.t
		why := "no game could be started for them; queue again later or try another mode"
		if f.quota != "" {
			why = "the tenant's quota refused their game (" + f.quota + "); queue again later"
		}
		o := outcome{Ticket: t.ID, TimedOut: "no match within " + rules.MaxWait.String() + ": matches were found, but " + why}
		ld.wg.Go(func() {
			rev := ld.settleAlone(ctx, t, o)
			ld.mu.Lock()
			defer ld.mu.Unlock()
			if rev != 0 {
				ld.inflight[t.ID] = rev // out of Form until the watch shows it gone
			} else {
				delete(ld.inflight, t.ID) // tried again at the next scan
			}
		})
	}
}

// settleAlone settles one ticket with the same outcome for all its players,
// and returns the settlement's revision (0: not settled, and logged).
func (ld *leader) settleAlone(ctx context.Context, t clusterstate.QueuedTicket, o outcome) int64 {
	b := o.encode()
	results := map[string][]byte{}
	for _, mem := range t.Members {
		results[mem.AccountID] = b
	}
	rev, err := ld.settle(ctx, []clusterstate.QueuedTicket{t}, results)
	if err != nil && ctx.Err() == nil {
		ld.m.log.Info("cannot settle ticket", "tenant", ld.tenant, "mode", ld.mode, "ticket", t.ID, "err", err)
	}
	return rev
}

func (ld *leader) settle(ctx context.Context, ts []clusterstate.QueuedTicket, results map[string][]byte) (int64, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := ld.m.resultsLease(sctx)
	if err != nil {
		return 0, err
	}
	return ld.m.state.Settle(sctx, ld.l, clusterstate.Settlement{Tickets: ts, Results: results, ResultsLease: lease})
}

// startAllocation marks the match's tickets in flight and allocates it in
// the background; false when MaxAllocating matches are in flight already.
func (ld *leader) startAllocation(ctx context.Context, rules matchmaking.Rules, match matchmaking.Match, byID map[string]clusterstate.QueuedTicket) bool {
	ld.mu.Lock()
	if ld.allocating >= ld.m.cfg.MaxAllocating {
		ld.mu.Unlock()
		return false
	}
	ld.allocating++
	for _, id := range match.Tickets {
		ld.inflight[id] = 0
	}
	ld.mu.Unlock()
	ts := make([]clusterstate.QueuedTicket, len(match.Tickets))
	for i, id := range match.Tickets {
		ts[i] = byID[id]
	}
	ld.wg.Add(1)
	go func() {
		defer ld.wg.Done()
		rev, allocErr := ld.allocate(ctx, rules, match, ts)
		now := ld.m.cfg.Now()
		ld.mu.Lock()
		defer ld.mu.Unlock()
		ld.allocating--
		for _, id := range match.Tickets {
			if rev != 0 {
				ld.inflight[id] = rev
				continue
			}
			delete(ld.inflight, id) // still queued: searching again
			if _, present := ld.queue[id]; allocErr != nil && present {
				f := ld.failing[id]
				f.n++
				f.until = now.Add(allocBackoff(f.n))
				f.quota = ""
				if ce := new(connect.Error); errors.As(allocErr, &ce) && ce.Code() == connect.CodeResourceExhausted {
					f.quota = utf8cut.Cut(ce.Message(), 300)
				}
				ld.failing[id] = f
			}
		}
	}()
	return true
}

// allocate starts the match's game and settles its tickets; it returns the
// settlement's revision, or 0 when the tickets stay in the queue, and the
// allocation's error when that is why.
func (ld *leader) allocate(ctx context.Context, rules matchmaking.Rules, match matchmaking.Match, ts []clusterstate.QueuedTicket) (rev int64, allocErr error) {
	m := ld.m
	party := map[string]string{}
	for _, t := range ts {
		party[t.ID] = t.Party
	}
	seats := make([][]Seat, len(match.Teams))
	for i, team := range match.Teams {
		for _, s := range team.Seats {
			seats[i] = append(seats[i], Seat{AccountID: s.AccountID, TicketID: s.TicketID, Party: party[s.TicketID], Rating: s.Rating, Bot: s.Bot})
		}
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.AllocateTimeout)
	start := time.Now()
	a, err := m.cfg.Allocator.Allocate(actx, ld.tenant, ld.mode, match.Region, seats)
	m.recordAllocate(time.Since(start))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("allocation failed; the tickets search again", "tenant", ld.tenant, "mode", ld.mode, "region", match.Region, "err", err)
		}
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	if a.Region == "" {
		a.Region = match.Region
	}
	results := map[string][]byte{}
	for ti, team := range match.Teams {
		var mates []string
		for _, s := range team.Seats {
			if !s.Bot {
				mates = append(mates, s.AccountID)
			}
		}
		for si, s := range team.Seats {
			if s.Bot {
				continue
			}
			results[s.AccountID] = outcome{Ticket: s.TicketID, Found: &foundSeat{
				GameID: a.GameID, Region: a.Region, Gateway: a.Gateway,
				Team: ti, Slot: ti*rules.TeamSize + si, Teammates: mates,
			}}.encode()
		}
	}
	rev, err = ld.settle(ctx, ts, results)
	switch {
	case errors.Is(err, clusterstate.ErrTicketsChanged):
		m.log.Info("match dropped: a ticket left during allocation", "tenant", ld.tenant, "mode", ld.mode, "game", a.GameID)
		ld.dropDeadPartyTickets(ctx, ts)
		return 0, nil
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("cannot settle match", "tenant", ld.tenant, "mode", ld.mode, "game", a.GameID, "err", err)
		}
		return 0, nil
	}
	return rev, nil
}

// dropDeadPartyTickets deletes the party tickets of a dropped match that
// no settlement can ever take (a member left since it was queued). Left in
// the queue, such a ticket, the oldest, would anchor the same match at
// every scan, start a game for it and fail to settle it again, while the
// players formed with it waited past MaxWait. A live ticket's members are
// unchanged, and DropDeadPartyTicket leaves it be.
func (ld *leader) dropDeadPartyTickets(ctx context.Context, ts []clusterstate.QueuedTicket) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, t := range ts {
		if t.Party == "" {
			continue
		}
		dropped, err := ld.m.state.DropDeadPartyTicket(dctx, t)
		switch {
		case err != nil && ctx.Err() == nil:
			ld.m.log.Info("cannot drop a party ticket of a dropped match", "tenant", ld.tenant, "mode", ld.mode, "ticket", t.ID, "err", err)
		case dropped:
			ld.m.log.Info("dropped a party ticket whose party changed since it was queued", "tenant", ld.tenant, "mode", ld.mode, "ticket", t.ID)
		}
	}
}
