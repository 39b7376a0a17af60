package matchmaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"buf.build/go/protovalidate"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/matchmaking"
)

// Caller is who calls FindMatch or CreateParty, as the gateway
// authenticated them.
type Caller struct {
	TenantID  string
	AccountID string
}

// PartyLeft is the reason every member of a party is given when one of them
// leaves.
const PartyLeft = "a party member left"

func cancelled(reason string) *ludusv1.FindMatchResponse {
	return &ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Cancelled{Cancelled: &ludusv1.MatchCancelled{Reason: reason}}}
}

// waiter is a stream waiting on this replica for its account's result.
type waiter struct {
	key string
	ch  chan clusterstate.Result
}

// register reserves the account's waiter on this replica: a second search of
// the account here fails at once.
func (m *Matchmaker) register(tenant, account string) (*waiter, error) {
	key := tenant + "/" + account
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.waiters[key]; ok {
		return nil, alreadySearching()
	}
	w := &waiter{key: key, ch: make(chan clusterstate.Result, 8)}
	m.waiters[key] = w
	return w, nil
}

func (m *Matchmaker) unregister(w *waiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiters[w.key] == w {
		delete(m.waiters, w.key)
	}
}

// deliver hands a result from the watch to the account's stream, if it is
// here (otherwise the result expires with its lease).
func (m *Matchmaker) deliver(r clusterstate.Result) {
	if f := m.faults.Load(); f != nil && f.result != nil {
		f.result()
	}
	m.mu.Lock()
	w := m.waiters[r.Tenant+"/"+r.Account]
	m.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case w.ch <- r:
	default:
	}
}

func alreadySearching() error {
	return fmt.Errorf("%w: this account is already in a matchmaking queue; close the other search first", ErrAlreadySearching)
}

// Find runs one player's search: it validates the request, queues the
// player (or joins their party), sends searching updates and then the
// outcome, and leaves the queue when ctx ends. Its errors wrap the package's
// sentinel errors (or are ctx's).
func (m *Matchmaker) Find(ctx context.Context, c Caller, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
	if !clusterstate.ValidID(c.TenantID) || !clusterstate.ValidID(c.AccountID) {
		return fmt.Errorf("%w: the caller has no valid tenant and account", ErrUnauthenticated)
	}
	if err := m.valid.Validate(req); err != nil {
		return invalid(err)
	}
	size := max(int(req.PartySize), 1)
	if req.PartyCode == "" && size > 1 {
		return fmt.Errorf("%w: party_size %d needs a party_code: create the party with CreateParty and share its code", ErrInvalid, size)
	}
	rules, err := m.loadRules(ctx, c.TenantID, req.Mode)
	if err != nil {
		return err
	}
	if size > rules.TeamSize {
		return fmt.Errorf("%w: a party of %d is larger than a team of mode %q (%d players)", ErrInvalid, size, req.Mode, rules.TeamSize)
	}
	r, err := m.cfg.Ratings.Rating(ctx, c.TenantID, req.Mode, c.AccountID)
	if err != nil {
		return fmt.Errorf("%w: cannot read the player's rating: %w", ErrUnavailable, err)
	}
	member := clusterstate.QueuedMember{
		AccountID: c.AccountID, Replica: m.ID(),
		Rating: math.Min(math.Max(r.Rating, matchmaking.MinRating), matchmaking.MaxRating),
		RTT:    make(map[string]float64, len(req.RttMs)),
	}
	for region, ms := range req.RttMs {
		member.RTT[region] = float64(ms)
	}
	// The player alone must fit the queue's regions; a party's common region
	// is checked by Form once it is complete.
	alone := matchmaking.Ticket{ID: "check", Tenant: c.TenantID, Mode: req.Mode, EnqueuedAt: m.cfg.Now(),
		Party: []matchmaking.Member{{AccountID: c.AccountID, Rating: member.Rating, RTT: member.RTT}}}
	if err := alone.Validate(rules); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}

	w, err := m.register(c.TenantID, c.AccountID)
	if err != nil {
		return err
	}
	defer m.unregister(w)
	s := &search{m: m, c: c, mode: req.Mode, rules: rules, member: member, w: w, send: send,
		token: randomID(10), lease: m.currentLease()}
	if req.PartyCode == "" {
		return s.solo(ctx)
	}
	return s.party(ctx, req.PartyCode, size)
}

func invalid(err error) error {
	var verr *protovalidate.ValidationError
	if errors.As(err, &verr) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// search is one FindMatch in progress.
type search struct {
	m      *Matchmaker
	c      Caller
	mode   string
	rules  matchmaking.Rules
	member clusterstate.QueuedMember
	w      *waiter
	send   func(*ludusv1.FindMatchResponse) error
	token  string
	lease  *clusterstate.Lease

	minRev   int64                   // results with a higher mod revision are this search's
	keys     []clusterstate.OwnedKey // to delete when the search ends without a result
	enqueued time.Time               // when the ticket was queued; zero before
	joined   int                     // party members streaming
	// settled is set when the party's keys, this member's included, were
	// deleted by a settlement: the result is on its way.
	settled bool
	ended   bool // end has run
}

// partyResultWait is how long a party member whose key a settlement deleted
// waits for its result from the replica's results watch before reading it
// from etcd.
const partyResultWait = 5 * time.Second

// end leaves the queue: deletes the search's keys, bounded, even after ctx
// ended. When etcd does not take the deletion in time (an election under
// way), it tries again for up to endWait while the stream is open: what
// the deletion finds tells whether the search was matched meanwhile
// (leave, settledMeanwhile), and the player is to be told that, not to
// search again. After that, or once the stream is gone, it goes on trying
// in the background: the keys are bound to the replica's lease, which
// outlives the search, so a ticket left behind would be matched without
// its player, and its search key would refuse the account's next search
// (AlreadyExists) for as long as the replica lives. It reports which of
// s.keys were there to delete (nil when etcd did not answer). A search
// ends once: later calls do nothing.
func (s *search) end(ctx context.Context) (found []bool) {
	if s.ended {
		return nil
	}
	s.ended = true
	deadline := time.Now().Add(endWait)
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := s.m.faults.Load().lose(ctx, "end", s.c.AccountID)
		if err == nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			found, err = s.m.state.EndSearchOwned(tctx, s.c.TenantID, s.c.AccountID, s.token, s.keys...)
			cancel()
		}
		if err == nil {
			return found
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			s.m.log.Warn("cannot leave the queue yet; trying again", "tenant", s.c.TenantID, "account", s.c.AccountID, "err", err)
			s.m.endLater(s.c.TenantID, s.c.AccountID, s.token, s.keys, s.lease)
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		case <-s.lease.Done():
			return nil // the keys went with the lease
		}
	}
}

// endWait bounds how long a search whose stream is open tries to delete
// its keys before it answers without knowing whether it was matched: about
// as long as etcd takes to elect a leader, a few times over.
const endWait = 10 * time.Second

// leave ends a party member's search when its party changed under it (a
// member left, or the party's watch broke), and reports whether the party
// was matched first: the member's own key (s.keys[0]) was gone before the
// deletion. While the search lives (its lease with it) only a settlement
// deletes that key, with every other member's, so the result is on its way
// and the search waits for it (s.settled). The party's watch may lag
// behind etcd (it catches up after an election): a member that went by
// the member it saw leave, and not by its own key, was told its party
// broke up although the party had been matched with it, and searched again
// alone while the others played.
func (s *search) leave(ctx context.Context) (matched bool) {
	if found := s.end(ctx); len(found) > 0 && !found[0] {
		s.settled, s.keys = true, nil
		return true
	}
	return false
}

func (s *search) searching(ctx context.Context) *ludusv1.FindMatchResponse {
	var elapsed time.Duration
	if !s.enqueued.IsZero() {
		elapsed = max(s.m.cfg.Now().Sub(s.enqueued), 0)
	}
	return &ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Searching{Searching: &ludusv1.MatchSearching{
		Band:        s.rules.Band(elapsed),
		ElapsedMs:   elapsed.Milliseconds(),
		QueueSize:   int32(s.m.queueSize(ctx, s.c.TenantID, s.mode)),
		PartyJoined: int32(s.joined),
	}}}
}

// result turns a delivered result into the stream's last message. ok is
// false for a stale one (an earlier search's).
func (s *search) result(r clusterstate.Result) (*ludusv1.FindMatchResponse, bool) {
	if r.Rev <= s.minRev {
		return nil, false
	}
	o, err := decodeOutcome(r.Value)
	if err != nil {
		s.m.log.Error("undecodable matchmaking result", "tenant", s.c.TenantID, "account", s.c.AccountID, "err", err)
		return cancelled("matchmaking failed; search again"), true
	}
	return o.response(), true
}

func (s *search) solo(ctx context.Context) error {
	id := "t" + randomID(10)
	now := s.m.cfg.Now()
	t := clusterstate.QueuedTicket{ID: id, Tenant: s.c.TenantID, Mode: s.mode, Enqueued: now,
		Members: []clusterstate.QueuedMember{s.member}}
	rev, err := s.m.state.Enqueue(ctx, s.lease, t, s.token)
	if err == nil {
		err = s.m.faults.Load().lose(ctx, "enqueue", s.c.AccountID)
	}
	s.keys = []clusterstate.OwnedKey{{Key: clusterstate.TicketKey(s.c.TenantID, s.mode, id)}}
	switch {
	case errors.Is(err, clusterstate.ErrAlreadySearching):
		return alreadySearching()
	case errors.Is(err, clusterstate.ErrBusy):
		return ErrOverloaded
	case err != nil:
		// The write may have been applied all the same (a timeout): take
		// the ticket back out rather than leave it for the lease to end.
		// If it was applied and matched before that, the match's result
		// is in etcd, named for the ticket: the player is told it.
		if found := s.end(ctx); len(found) > 0 && !found[0] {
			if resp, ok := s.settledMeanwhile(ctx, func(ticket string) bool { return ticket == id }); ok {
				return s.send(resp)
			}
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.minRev, s.enqueued, s.joined = rev, now, 1
	return s.wait(ctx, nil, nil)
}

// settledMeanwhile reads the result of a ticket of this search (ours says
// which ids are), queued although its write (an enqueue, a party join)
// failed, and settled before the search could take it back out. The
// settlement wrote it with the deletion the search found done.
// A stream that has ended (the player left, the gateway went) has nobody to
// tell, and the read is dear: etcd visits every result on the replica for
// the tenant (up to 30 s of them). A mass of streams cancelled while their
// writes waited — a burst of players leaving an overloaded replica — made
// a read each: in a bench run held at 5,000 tickets/s, etcd's range reads
// were 23 % of the process's CPU, and too few to show once skipped
// (docs/BENCHMARKS.md).
func (s *search) settledMeanwhile(ctx context.Context, ours func(ticket string) bool) (*ludusv1.FindMatchResponse, bool) {
	if ctx.Err() != nil {
		return nil, false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	r, ok, err := s.readResult(rctx, 0)
	if err != nil || !ok {
		return nil, false
	}
	if o, err := decodeOutcome(r.Value); err != nil || !ours(o.Ticket) {
		return nil, false // an earlier search's
	}
	return s.result(r)
}

// wait sends searching updates until a result arrives, ctx ends or the lease
// is lost. party, if not nil, delivers the party's members as they change
// (nil: the watch broke); onParty handles them, and may set s.settled, after
// which the result is read from etcd if the results watch has not brought
// it within partyResultWait.
func (s *search) wait(ctx context.Context, party <-chan []clusterstate.PartyMember, onParty func([]clusterstate.PartyMember) (*ludusv1.FindMatchResponse, error)) error {
	if err := s.send(s.searching(ctx)); err != nil {
		s.end(ctx)
		return err
	}
	tick := time.NewTicker(s.m.cfg.StatusInterval)
	defer tick.Stop()
	var late <-chan time.Time // set once s.settled
	if s.settled {
		party, late = nil, time.After(partyResultWait)
	}
	for {
		var last *ludusv1.FindMatchResponse
		select {
		case <-ctx.Done():
			s.end(ctx)
			return ctx.Err()
		case <-s.lease.Done():
			s.end(ctx)
			// A settlement may have taken the search's keys just before the
			// lease went, its result still on the way here: the player
			// has a seat, and the others of the match wait for them.
			if resp, ok := s.resultNow(ctx); ok {
				return s.send(resp)
			}
			return fmt.Errorf("%w: the matchmaker lost its lease; search again", ErrUnavailable)
		case r := <-s.w.ch:
			resp, ok := s.result(r)
			if !ok {
				continue
			}
			return s.send(resp)
		case ms := <-party:
			resp, err := onParty(ms)
			if err != nil {
				s.end(ctx)
				return err
			}
			last = resp
			if s.settled && late == nil {
				party, late = nil, time.After(partyResultWait)
			}
		case <-late:
			if resp, ok := s.resultNow(ctx); ok {
				return s.send(resp)
			}
			s.end(ctx)
			return s.send(cancelled(PartyLeft))
		case <-tick.C:
		}
		if last != nil {
			return s.send(last)
		}
		if err := s.send(s.searching(ctx)); err != nil {
			s.end(ctx)
			return err
		}
	}
}

// resultNow reads this search's result from etcd, for when the results
// watch may not have brought it yet: bounded, and even after ctx ended.
func (s *search) resultNow(ctx context.Context) (*ludusv1.FindMatchResponse, bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	r, ok, err := s.readResult(rctx, s.minRev)
	if err != nil || !ok {
		return nil, false
	}
	return s.result(r)
}

// readResult reads the search's newest result on this replica committed
// after revision after (clusterstate.Client.Result).
func (s *search) readResult(ctx context.Context, after int64) (clusterstate.Result, bool, error) {
	if f := s.m.faults.Load(); f != nil && f.resultRead != nil {
		f.resultRead()
	}
	return s.m.state.Result(ctx, s.m.ID(), s.c.TenantID, s.c.AccountID, after)
}

func (s *search) party(ctx context.Context, code string, size int) error {
	// Follow the party from before the join: every change after it is seen.
	follow, err := s.m.state.FollowParty(ctx, s.c.TenantID, code)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer follow.Stop()
	p := clusterstate.Party{Code: code, Tenant: s.c.TenantID, Mode: s.mode, Size: size}
	j, err := s.m.state.JoinParty(ctx, s.lease, p, clusterstate.PartyMember{QueuedMember: s.member, Token: s.token})
	if err == nil {
		err = s.m.faults.Load().lose(ctx, "join", s.c.AccountID)
	}
	var mismatch *clusterstate.PartyMismatch
	switch {
	case errors.Is(err, clusterstate.ErrAlreadySearching):
		return alreadySearching()
	case errors.Is(err, clusterstate.ErrNoParty):
		return fmt.Errorf("%w: no party with code %q; codes expire 15 minutes after CreateParty, or when their creator creates another party", ErrNoParty, code)
	case errors.As(err, &mismatch):
		return fmt.Errorf("%w: party %q is for mode %q with %d players; call FindMatch with that mode and party_size", ErrInvalid, code, mismatch.Mode, mismatch.Size)
	case errors.Is(err, clusterstate.ErrPartyFull):
		return fmt.Errorf("%w: all %d players of party %q are searching already", ErrPartyFull, size, code)
	case errors.Is(err, clusterstate.ErrBusy):
		return ErrOverloaded
	case err != nil:
		// The join may have been applied all the same (a timeout while
		// etcd elects a leader): take the member key and the search key
		// back out, as solo does its ticket. Left behind, the member would
		// fill the party with nobody behind it, so its ticket is never
		// queued, and the account's next search would be refused.
		// If it was applied and the party matched before the deletion,
		// the result is in etcd, named for a ticket of this party.
		s.keys = []clusterstate.OwnedKey{{Key: clusterstate.PartyMemberKey(s.c.TenantID, code, s.c.AccountID)}}
		if found := s.end(ctx); len(found) > 0 && !found[0] {
			if resp, ok := s.settledMeanwhile(ctx, func(ticket string) bool { return strings.HasPrefix(ticket, code+"-") }); ok {
				return s.send(resp)
			}
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.minRev = j.Rev
	// The member key is this search's as created at j.Rev: a deletion
	// retried late must not take the key of the account's next search.
	s.keys = []clusterstate.OwnedKey{{Key: clusterstate.PartyMemberKey(s.c.TenantID, code, s.c.AccountID), CreateRev: j.Rev}}

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	// Every change, in order: a member who joined and left between two
	// looks must still be seen leaving.
	updates := make(chan []clusterstate.PartyMember, 16)
	go func() {
		err := follow.Watch(pctx, j.Rev, j.Members, func(ms []clusterstate.PartyMember) bool {
			if f := s.m.faults.Load(); f != nil && f.partyChange != nil {
				f.partyChange()
			}
			select {
			case updates <- ms:
				return true
			case <-pctx.Done():
				return false
			}
		})
		if err != nil && pctx.Err() == nil {
			select {
			case updates <- nil: // nil: the watch broke
			case <-pctx.Done():
			}
		}
	}()
	seen := map[string]int64{} // account -> create revision of the member's key seen
	queued := false
	onParty := func(ms []clusterstate.PartyMember) (*ludusv1.FindMatchResponse, error) {
		if ms == nil {
			if s.leave(ctx) {
				stop()
				return nil, nil
			}
			return nil, fmt.Errorf("%w: lost track of the party; search again", ErrUnavailable)
		}
		// Who joined after the party was full is not in it (and leaves
		// again at once): only the first size count (ms is in join
		// order: clusterstate.Roster).
		ms = ms[:min(len(ms), size)]
		now := map[string]int64{}
		for _, pm := range ms {
			now[pm.AccountID] = pm.CreateRev
		}
		if now[s.c.AccountID] != j.Rev {
			// Our own key is gone, with the others' (a settlement deletes
			// them all at one revision): the result is on its way.
			s.settled, s.keys = true, nil
			stop()
			return nil, nil
		}
		for account, rev := range seen {
			if now[account] != rev { // a member left
				if s.leave(ctx) {
					stop()
					return nil, nil
				}
				return cancelled(PartyLeft), nil
			}
		}
		seen = now
		s.joined = len(ms)
		if len(ms) == size && !queued {
			queued = true
			id := clusterstate.PartyTicketID(code, ms)
			t := clusterstate.QueuedTicket{ID: id, Tenant: s.c.TenantID, Mode: s.mode, Party: code, Enqueued: s.m.cfg.Now()}
			newest := int64(0)
			for _, pm := range ms {
				qm := pm.QueuedMember
				qm.Slot, qm.MemberRev = pm.Slot, pm.Rev
				t.Members = append(t.Members, qm)
				newest = max(newest, pm.CreateRev)
			}
			// Every member deletes the ticket when it leaves; the one who
			// joined last queues it (the others would only lose a compare).
			s.keys = append(s.keys, clusterstate.OwnedKey{Key: clusterstate.TicketKey(s.c.TenantID, s.mode, id)})
			s.enqueued = t.Enqueued
			if newest == j.Rev {
				_, err := s.m.state.QueuePartyTicket(ctx, s.lease, t)
				if err == nil {
					err = s.m.faults.Load().lose(ctx, "party ticket", s.c.AccountID)
				}
				if err != nil {
					// Applied all the same and matched already, the
					// party's keys are gone with this member's.
					if s.leave(ctx) {
						stop()
						return nil, nil
					}
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
			}
		}
		return nil, nil
	}
	// The party as of the join first: the member who completes it queues
	// the ticket at once.
	if _, err := onParty(j.Members); err != nil {
		s.end(ctx)
		return err
	}
	return s.wait(ctx, updates, onParty)
}
