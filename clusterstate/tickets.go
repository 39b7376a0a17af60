package clusterstate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Matchmaking state (package matchmaker). Key layout, under Prefix:
//
//	/ludus/mm/rules/{tenant}/{mode}              a queue's rules (the matchmaker's JSON); no lease
//	/ludus/mm/tickets/{tenant}/{mode}/{ticket}   a QueuedTicket ("Values" below), bound to the lease of the
//	                                             replica holding the stream that queued it; its
//	                                             mod revision is compared when it is settled
//	/ludus/mm/accounts/{tenant}/{account}        the token of the account's one search in the
//	                                             tenant (any mode), bound to the replica's lease
//	/ludus/mm/parties/{tenant}/{code}            the party's mode and size (JSON), bound to a
//	                                             party lease (about 15 min)
//	/ludus/mm/party-creators/{tenant}/{account}  the code of the account's one open party (it replaces
//	                                             the one before), bound to the party's lease
//	/ludus/mm/party-accounts/{tenant}/{code}/{account}
//	                                             a PartyMember ("Values"), bound to the member's replica lease;
//	                                             the party is its first Size members by create
//	                                             revision (then key): see JoinParty
//	/ludus/mm/results/{replica}/{tenant}/{ticket}
//	                                             the outcomes of one settlement for the streams on
//	                                             replica, by account ("Values"; the matchmaker's values),
//	                                             named for the settlement's first ticket with a player
//	                                             there; bound to a short results lease
//	/ludus/mm/sizes/{tenant}/{mode}              how many tickets the queue holds (decimal), as its
//	                                             leader last counted them; bound to the leader's lease
//	/ludus/elections/mm/{tenant}/{mode}/{lease}  candidates for leading the queue (Campaign)
//
// The queue's leader settles tickets (matched, timed out) in one transaction
// fenced on its leader key, each ticket's mod revision and each party
// member's key: a ticket that left, or changed, or a leader that lost its
// term, makes the whole settlement fail, so no ticket is matched twice and
// none is dropped.
//
// The writes of concurrent callers of one Client (tickets queued, parties
// joined, matches settled, searches ended) are committed in groups: see
// "Group commit" below. Each keeps its own compares and its own outcome.

// Matchmaking errors.
var (
	// ErrNoRules: the queue has no rules (the tenant never set them).
	ErrNoRules = errors.New("clusterstate: no matchmaking rules")
	// ErrAlreadySearching: the account already has a search in the tenant.
	ErrAlreadySearching = errors.New("clusterstate: the account is already searching")
	// ErrNoParty: no party has this code (never created, or expired).
	ErrNoParty = errors.New("clusterstate: no such party")
	// ErrPartyExists: a party code collided; pick another.
	ErrPartyExists = errors.New("clusterstate: party code taken")
	// ErrPartyFull: every slot of the party is taken.
	ErrPartyFull = errors.New("clusterstate: the party is full")
	// ErrTicketsChanged: a settlement's ticket or party member changed or
	// left since it was read; read the queue again.
	ErrTicketsChanged = errors.New("clusterstate: a ticket changed since it was read")
	// ErrBusy: writes wait longer than maxAdmissionWait to be committed, so
	// a new search is refused rather than queued behind them; try again.
	ErrBusy = errors.New("clusterstate: too many matchmaking writes waiting")
)

// Matchmaking key builders. Tenant, mode, account, replica, ticket ids and
// party codes must be ValidID.
func mmPrefix() string                         { return Prefix + "mm/" }
func MatchRulesPrefix() string                 { return mmPrefix() + "rules/" }
func MatchRulesKey(tenant, mode string) string { return MatchRulesPrefix() + tenant + "/" + mode }
func TicketsPrefix(tenant, mode string) string {
	return mmPrefix() + "tickets/" + tenant + "/" + mode + "/"
}
func TicketKey(tenant, mode, ticket string) string { return TicketsPrefix(tenant, mode) + ticket }
func SearchKey(tenant, account string) string {
	return mmPrefix() + "accounts/" + tenant + "/" + account
}
func PartyKey(tenant, code string) string { return mmPrefix() + "parties/" + tenant + "/" + code }
func partyMembersRoot() string            { return mmPrefix() + "party-accounts/" }

// PartyCreatorKey holds the code of the one open party account created in
// tenant (CreateParty).
func PartyCreatorKey(tenant, account string) string {
	return mmPrefix() + "party-creators/" + tenant + "/" + account
}
func PartyMembersPrefix(tenant, code string) string {
	return partyMembersRoot() + tenant + "/" + code + "/"
}
func PartyMemberKey(tenant, code, account string) string {
	return PartyMembersPrefix(tenant, code) + account
}

// legacyPartySlotKey is where versions before party-accounts kept a party's
// member: by slot. Tickets they queued (slotKeyed) are settled against it.
func legacyPartySlotKey(tenant, code string, slot int) string {
	return mmPrefix() + "party-members/" + tenant + "/" + code + "/" + strconv.Itoa(slot)
}
func ResultsPrefix(replica string) string { return mmPrefix() + "results/" + replica + "/" }
func ResultKey(replica, tenant, ticket string) string {
	return ResultsPrefix(replica) + tenant + "/" + ticket
}

// QueueSizeKey is where a queue's leader publishes its ticket count.
func QueueSizeKey(tenant, mode string) string { return mmPrefix() + "sizes/" + tenant + "/" + mode }

// MatchElection is the name of the election for leading a queue.
func MatchElection(tenant, mode string) string { return "mm/" + tenant + "/" + mode }

// QueuedTicket is a ticket in a queue: one party (or one player).
type QueuedTicket struct {
	ID       string         `json:"id"`
	Tenant   string         `json:"tenant"`
	Mode     string         `json:"mode"`
	Party    string         `json:"party,omitempty"` // party code; "" for one player
	Enqueued time.Time      `json:"enqueued"`
	Members  []QueuedMember `json:"members"`

	// Rev is the ticket key's mod revision when read; settlements compare it.
	Rev int64 `json:"-"`
	// slotKeyed: a party ticket queued by an earlier version, whose members'
	// keys are by slot (legacyPartySlotKey).
	slotKeyed bool
}

// QueuedMember is one player of a ticket.
type QueuedMember struct {
	AccountID string             `json:"account"`
	Replica   string             `json:"replica"` // where the player's stream is: results go there
	Rating    float64            `json:"rating"`
	RTT       map[string]float64 `json:"rtt"`
	// In a party: the member's place in join order and its key's mod
	// revision, compared when the ticket is queued and settled.
	Slot      int   `json:"slot,omitempty"`
	MemberRev int64 `json:"member_rev,omitempty"`
}

// PutMatchRules stores a queue's rules (opaque to clusterstate).
//
// A mode new to the tenant is refused with ErrTooManyModes when the tenant
// has MaxModesPerTenant already: every replica watches every queue and the
// one that leads it scans it several times a second, so modes cost the
// whole matchmaking tier. Concurrent creations of new modes may overshoot the
// bound by as many as run at once.
func (c *Client) PutMatchRules(ctx context.Context, tenant, mode string, rules []byte) error {
	key := MatchRulesKey(tenant, mode)
	resp, err := c.cli.Get(ctx, MatchRulesPrefix()+tenant+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	if len(resp.Kvs) >= MaxModesPerTenant && !slices.ContainsFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == key }) {
		return fmt.Errorf("%w: tenant has %d", ErrTooManyModes, len(resp.Kvs))
	}
	_, err = c.cli.Put(ctx, key, string(rules))
	return err
}

// MaxModesPerTenant is how many matchmaking modes (rules) a tenant may have.
const MaxModesPerTenant = 32

// ErrTooManyModes: PutMatchRules of a new mode for a tenant that has
// MaxModesPerTenant already.
var ErrTooManyModes = errors.New("clusterstate: too many matchmaking modes")

// MatchRules returns a queue's rules, or ErrNoRules.
func (c *Client) MatchRules(ctx context.Context, tenant, mode string) ([]byte, error) {
	resp, err := c.cli.Get(ctx, MatchRulesKey(tenant, mode))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNoRules
	}
	return resp.Kvs[0].Value, nil
}

// DeleteMatchRules deletes a queue's rules and reports whether it had any.
func (c *Client) DeleteMatchRules(ctx context.Context, tenant, mode string) (bool, error) {
	resp, err := c.cli.Delete(ctx, MatchRulesKey(tenant, mode))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// WatchMatchQueues calls fn with the rules of every queue that has some,
// and with nil rules for every queue whose rules are deleted: first for
// those there now, then as they change, until ctx ends. After a broken watch
// it reads them all again: fn hears again of every queue with rules, and of
// the deletion of those it was told of that have none any more.
func (c *Client) WatchMatchQueues(ctx context.Context, fn func(tenant, mode string, rules []byte)) {
	split := func(k []byte) (string, string, bool) {
		return splitGameKey(string(k), MatchRulesPrefix())
	}
	known := map[string]bool{} // rules keys fn was last told are present
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, MatchRulesPrefix(), clientv3.WithPrefix())
		if err == nil {
			now := map[string]bool{}
			for _, kv := range resp.Kvs {
				if t, m, ok := split(kv.Key); ok {
					now[string(kv.Key)] = true
					fn(t, m, kv.Value)
				}
			}
			for k := range known {
				if t, m, ok := split([]byte(k)); ok && !now[k] {
					fn(t, m, nil)
				}
			}
			known = now
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range c.cli.Watch(wctx, MatchRulesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil || wr.Canceled {
					break
				}
				for _, ev := range wr.Events {
					t, m, ok := split(ev.Kv.Key)
					if !ok {
						continue
					}
					if ev.Type == mvccpb.PUT {
						known[string(ev.Kv.Key)] = true
						fn(t, m, ev.Kv.Value)
					} else {
						delete(known, string(ev.Kv.Key))
						fn(t, m, nil)
					}
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// QueueChange is what WatchQueue reports: the whole queue (Reset), or what
// changed since the last call.
type QueueChange struct {
	// Reset: Put holds every ticket of the queue; forget the earlier ones.
	Reset bool
	// Put holds the tickets queued or changed, with their mod revisions.
	// Tickets whose value does not decode are left out (and stay in etcd
	// until their lease ends).
	Put []QueuedTicket
	// Deleted holds the ids of the tickets that left (or whose new value
	// does not decode).
	Deleted []string
	// Rev: with this change, the queue as reported is the queue at Rev.
	Rev int64
}

// WatchQueue calls fn with a queue's tickets now (a Reset), then with every
// change in revision order, until ctx ends. After a broken watch it reads
// the queue again (another Reset). Each ticket's value is decoded once, when
// it is queued, rather than on every read of the queue.
func (c *Client) WatchQueue(ctx context.Context, tenant, mode string, fn func(QueueChange)) {
	prefix := TicketsPrefix(tenant, mode)
	decode := func(kv *mvccpb.KeyValue) (QueuedTicket, bool) {
		t, ok := decodeTicket(kv.Value)
		if !ok {
			return t, false
		}
		// The key, not the value, says which ticket it is.
		t.Tenant, t.Mode, t.ID, t.Rev = tenant, mode, string(kv.Key[len(prefix):]), kv.ModRevision
		return t, true
	}
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err == nil {
			ch := QueueChange{Reset: true, Rev: resp.Header.Revision, Put: make([]QueuedTicket, 0, len(resp.Kvs))}
			for _, kv := range resp.Kvs {
				if t, ok := decode(kv); ok {
					ch.Put = append(ch.Put, t)
				}
			}
			fn(ch)
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range c.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil || wr.Canceled {
					break
				}
				ch := QueueChange{Rev: seenUpTo(wr)}
				for _, ev := range wr.Events {
					if t, ok := decode(ev.Kv); ok && ev.Type == mvccpb.PUT {
						ch.Put = append(ch.Put, t)
					} else {
						ch.Deleted = append(ch.Deleted, string(ev.Kv.Key[len(prefix):]))
					}
				}
				fn(ch)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// seenUpTo is the revision up to which a watch response (and those before
// it) holds every change: its last event's, or for one without events (a
// progress report, sent only to a watcher that is up to date) its header's.
// The header alone is not enough: etcd catching a watcher up sends at most
// 1,000 revisions of changes at a time under the header of the newest.
func seenUpTo(wr clientv3.WatchResponse) int64 {
	if n := len(wr.Events); n > 0 {
		return wr.Events[n-1].Kv.ModRevision
	}
	return wr.Header.Revision
}

// CountTickets returns how many tickets a queue holds. etcd counts them by
// visiting every ticket key since its last compaction, those deleted
// included, so this costs in proportion to the queue's traffic (an hour of
// it, with ops/etcdserver's compaction): for tests and tools, not for every
// search; QueueSize reads the leader's count.
func (c *Client) CountTickets(ctx context.Context, tenant, mode string) (int, error) {
	resp, err := c.cli.Get(ctx, TicketsPrefix(tenant, mode), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// PutQueueSize publishes a queue's ticket count as its leader l counts it,
// bound to lease (the one l campaigned with, so that the count goes with the
// leader), if l still leads. It is committed with the client's other writes.
func (c *Client) PutQueueSize(ctx context.Context, l *Leadership, lease *Lease, tenant, mode string, n int) error {
	it := newTxnItem(lease.ID(), []*pb.Compare{l.fence()},
		[]*pb.RequestOp{opPut(QueueSizeKey(tenant, mode), strconv.Itoa(n), lease.ID())}, nil)
	if err := c.committer().do(ctx, it); err != nil {
		return err
	}
	if !it.resp.Succeeded {
		return ErrNotLeader
	}
	return nil
}

// QueueSize returns a queue's ticket count as its leader last published it
// (PutQueueSize); ok is false when none did, or the leader's lease ended.
// One key read, whatever the queue's traffic.
func (c *Client) QueueSize(ctx context.Context, tenant, mode string) (n int, ok bool, err error) {
	resp, err := c.cli.Get(ctx, QueueSizeKey(tenant, mode))
	if err != nil || len(resp.Kvs) == 0 {
		return 0, false, err
	}
	n, err = strconv.Atoi(string(resp.Kvs[0].Value))
	if err != nil {
		return 0, false, fmt.Errorf("clusterstate: queue size of %s/%s: %w", tenant, mode, err)
	}
	return n, true, nil
}

// Enqueue puts a one-player ticket in its queue, bound to lease, and takes
// the player's search key with token (ErrAlreadySearching if the player is
// searching already). It returns the revision of the write: results with a
// higher mod revision are this search's (an earlier search's result, still
// there until its lease ends, has a lower one). Concurrent calls are
// committed together; ErrBusy when etcd is not keeping up with them.
func (c *Client) Enqueue(ctx context.Context, lease *Lease, t QueuedTicket, token string) (int64, error) {
	if len(t.Members) != 1 {
		return 0, fmt.Errorf("clusterstate: Enqueue takes a one-player ticket, got %d players", len(t.Members))
	}
	it := enqueueTxn(lease.ID(), t, token)
	it.admission = true
	if err := c.committer().do(ctx, it); err != nil {
		return 0, err
	}
	return it.enqueued()
}

// enqueueTxn is Enqueue's transaction.
func enqueueTxn(lease int64, t QueuedTicket, token string) *txnItem {
	b := encodeTicket(t)
	search := SearchKey(t.Tenant, t.Members[0].AccountID)
	ticket := TicketKey(t.Tenant, t.Mode, t.ID)
	return newTxnItem(lease,
		[]*pb.Compare{cmpCreated(search, 0), cmpCreated(ticket, 0)},
		[]*pb.RequestOp{opPut(search, token, lease), opPut(ticket, b, lease)}, nil)
}

// enqueued is the outcome of a committed enqueueTxn.
func (it *txnItem) enqueued() (int64, error) {
	if it.err != nil {
		return 0, it.err
	}
	if !it.resp.Succeeded {
		return 0, ErrAlreadySearching
	}
	return it.rev, nil
}

// EndSearch ends an account's search: it deletes keys (the search's ticket,
// its party member key; any may be gone already) and the account's search
// key if it still holds token (a newer search of the account keeps its own).
// found[i] reports whether keys[i] was there to delete: a party member
// whose own key a settlement took first was matched (see
// matchmaker's search.leave).
func (c *Client) EndSearch(ctx context.Context, tenant, account, token string, keys ...string) (found []bool, err error) {
	owned := make([]OwnedKey, len(keys))
	for i, k := range keys {
		owned[i] = OwnedKey{Key: k}
	}
	return c.EndSearchOwned(ctx, tenant, account, token, owned...)
}

// OwnedKey is a key a search wrote, for EndSearchOwned: CreateRev, when
// not 0, is the revision the search created it at, and it is deleted only
// if it is still that one. A party member's key is named for its account
// alone: a deletion retried late (endLater) must not take the key of the
// account's next search of the same party.
type OwnedKey struct {
	Key       string
	CreateRev int64
}

// EndSearchOwned is EndSearch for keys a search owns (OwnedKey). found[i]
// is false for a key gone, or another search's.
func (c *Client) EndSearchOwned(ctx context.Context, tenant, account, token string, keys ...OwnedKey) (found []bool, err error) {
	search := SearchKey(tenant, account)
	ops := make([]*pb.RequestOp, 0, len(keys)+1)
	for _, k := range keys {
		if k.CreateRev == 0 {
			ops = append(ops, opDelete(k.Key))
			continue
		}
		ops = append(ops, opTxn([]*pb.Compare{cmpCreated(k.Key, k.CreateRev)}, []*pb.RequestOp{opDelete(k.Key)}, nil))
	}
	it := newTxnItem(0, []*pb.Compare{cmpValue(search, token)},
		append(slices.Clip(ops), opDelete(search)), ops)
	if err := c.committer().do(ctx, it); err != nil {
		return nil, err
	}
	found = make([]bool, len(keys))
	for i, r := range it.resp.Responses[:len(keys)] {
		if t := r.GetResponseTxn(); t != nil {
			found[i] = t.Succeeded && len(t.Responses) > 0 && t.Responses[0].GetResponseDeleteRange().GetDeleted() > 0
			continue
		}
		found[i] = r.GetResponseDeleteRange().GetDeleted() > 0
	}
	return found, nil
}

// Settlement is a leader's decision about some tickets of a queue: they
// leave it, and each of their players' streams gets a result.
type Settlement struct {
	Tickets []QueuedTicket    // as read (with Rev)
	Results map[string][]byte // account id -> the result for its stream
	// ResultsLease is the lease the results are bound to (GrantExpiringLease):
	// a result nobody reads vanishes with it.
	ResultsLease int64
}

// Settle commits s in one transaction fenced on l: only if l still leads,
// every ticket is unchanged since read and every party member is still in
// the party, it deletes the tickets, their players' search keys and party
// member keys, and puts the results. Otherwise nothing is written and it
// returns ErrNotLeader or ErrTicketsChanged. It returns the commit revision.
// Concurrent settlements are committed together, each with its own
// compares: one that fails leaves the others be.
func (c *Client) Settle(ctx context.Context, l *Leadership, s Settlement) (int64, error) {
	it := settleTxn(l, s)
	it.urgent = true
	if err := c.committer().do(ctx, it); err != nil {
		return 0, err
	}
	return it.settled(l)
}

// settleTxn is Settle's transaction. The results go out in one key per
// replica (named for the first ticket with a player there) rather than one
// per player: fewer keys to write, expire and watch.
func settleTxn(l *Leadership, s Settlement) *txnItem {
	// Sized once, not grown (a ticket: its delete and compare; a player:
	// its search key's delete, in a party its member key's delete and
	// compare; a results key per replica).
	n := 0
	for _, t := range s.Tickets {
		n += 1 + 2*len(t.Members)
	}
	cmps := make([]*pb.Compare, 1, 1+n)
	cmps[0] = l.fence()
	ops := make([]*pb.RequestOp, 0, n+4)
	type bundle struct {
		key     string
		results map[string][]byte
	}
	var bundles []*bundle // in the order of the tickets: the keys do not depend on map order
	byReplica := map[string]*bundle{}
	for _, t := range s.Tickets {
		key := TicketKey(t.Tenant, t.Mode, t.ID)
		cmps = append(cmps, cmpModified(key, t.Rev))
		ops = append(ops, opDelete(key))
		for _, m := range t.Members {
			ops = append(ops, opDelete(SearchKey(t.Tenant, m.AccountID)))
			if t.Party != "" {
				mk := PartyMemberKey(t.Tenant, t.Party, m.AccountID)
				if t.slotKeyed {
					mk = legacyPartySlotKey(t.Tenant, t.Party, m.Slot)
				}
				cmps = append(cmps, cmpModified(mk, m.MemberRev))
				ops = append(ops, opDelete(mk))
			}
			r, ok := s.Results[m.AccountID]
			if !ok {
				continue
			}
			b := byReplica[t.Tenant+"/"+m.Replica]
			if b == nil {
				b = &bundle{key: ResultKey(m.Replica, t.Tenant, t.ID), results: map[string][]byte{}}
				byReplica[t.Tenant+"/"+m.Replica] = b
				bundles = append(bundles, b)
			}
			b.results[m.AccountID] = r
		}
	}
	for _, b := range bundles {
		v := encodeResults(b.results)
		ops = append(ops, opPut(b.key, v, s.ResultsLease))
	}
	return newTxnItem(s.ResultsLease, cmps, ops, []*pb.RequestOp{opGet(l.key)})
}

// settled is the outcome of a committed settleTxn.
func (it *txnItem) settled(l *Leadership) (int64, error) {
	if it.err != nil {
		return 0, it.err
	}
	if !it.resp.Succeeded {
		kvs := it.resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != l.rev {
			return 0, ErrNotLeader
		}
		return 0, ErrTicketsChanged
	}
	return it.rev, nil
}

// GrantExpiringLease grants a lease of ttl (whole seconds, at least one)
// that is not kept alive: keys bound to it (Settlement.ResultsLease,
// CreateParty) vanish at most ttl later.
func (c *Client) GrantExpiringLease(ctx context.Context, ttl time.Duration) (int64, error) {
	resp, err := c.cli.Grant(ctx, max(int64(ttl/time.Second), 1))
	if err != nil {
		return 0, err
	}
	return int64(resp.ID), nil
}

// Result is a search's outcome as delivered to a replica.
type Result struct {
	Tenant, Account string
	Value           []byte
	Rev             int64 // mod revision
}

// Result returns the newest result for an account's stream on replica
// committed after revision after, if any. It reads every result on replica
// for the tenant newer than that: for a stream that missed its result on the
// watch (WatchResults), not for every search.
func (c *Client) Result(ctx context.Context, replica, tenant, account string, after int64) (Result, bool, error) {
	resp, err := c.cli.Get(ctx, ResultsPrefix(replica)+tenant+"/", clientv3.WithPrefix(), clientv3.WithMinModRev(after+1))
	if err != nil {
		return Result{}, false, err
	}
	var found Result
	for _, kv := range resp.Kvs {
		results, ok := decodeResults(kv.Value)
		if !ok {
			continue
		}
		if v, ok := results[account]; ok && kv.ModRevision > found.Rev {
			found = Result{Tenant: tenant, Account: account, Value: v, Rev: kv.ModRevision}
		}
	}
	return found, found.Rev != 0, nil
}

// WatchResults calls fn with every result put for streams on replica, first
// those there now, then as they come, until ctx ends; after a broken watch
// it reads them all again (fn may see a result twice).
func (c *Client) WatchResults(ctx context.Context, replica string, fn func(Result)) {
	prefix := ResultsPrefix(replica)
	deliver := func(kv *mvccpb.KeyValue) {
		tenant, _, ok := splitGameKey(string(kv.Key), prefix)
		if !ok {
			return
		}
		results, ok := decodeResults(kv.Value)
		if !ok {
			return
		}
		for account, v := range results {
			fn(Result{Tenant: tenant, Account: account, Value: v, Rev: kv.ModRevision})
		}
	}
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err == nil {
			for _, kv := range resp.Kvs {
				deliver(kv)
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range c.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1),
				clientv3.WithFilterDelete()) {
				if wr.Err() != nil || wr.Canceled {
					break
				}
				for _, ev := range wr.Events {
					deliver(ev.Kv)
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Party is a party code reserved by CreateParty.
type Party struct {
	Code    string
	Tenant  string
	Mode    string
	Size    int
	Creator string
	Expires time.Time
}

// partyValue is what a party's key holds: only what a member must match
// (mode and size), always encoded alike, so that JoinParty compares it in
// the transaction that takes the member's slot.
type partyValue struct {
	Mode string `json:"mode"`
	Size int    `json:"size"`
}

func (p Party) value() string {
	// Built by hand for the modes the matchmaker accepts (letters, digits,
	// - and _, which JSON does not escape): every join compares it, and
	// json.Marshal's reflection was about a third of JoinParty's CPU in a
	// saturation profile. The bytes are json.Marshal's (TestPartyValueIsJSON).
	if plainMode(p.Mode) {
		return `{"mode":"` + p.Mode + `","size":` + strconv.Itoa(p.Size) + `}`
	}
	b, _ := json.Marshal(partyValue{Mode: p.Mode, Size: p.Size}) // cannot fail
	return string(b)
}

func plainMode(mode string) bool {
	for i := range len(mode) {
		c := mode[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CreateParty stores p bound to lease (GrantExpiringLease; parties may
// share one); ErrPartyExists if its code is taken, ErrBusy as Enqueue.
//
// A creator has one open party at a time: p.Creator's creator key names
// its party, and a new party replaces the one it names, whose key goes in
// the same transaction (its members keep their places, as when a party
// expires; nobody can join it any more). So however often an account
// creates parties, it holds one party key in etcd, not one per call for
// the party's 15 minutes. A party without a Creator (tests, tools) is not
// counted.
func (c *Client) CreateParty(ctx context.Context, p Party, lease int64) error {
	key := PartyKey(p.Tenant, p.Code)
	if p.Creator == "" {
		it := newTxnItem(lease, []*pb.Compare{cmpCreated(key, 0)}, []*pb.RequestOp{opPut(key, p.value(), lease)}, nil)
		it.admission = true
		if err := c.committer().do(ctx, it); err != nil {
			return err
		}
		if !it.resp.Succeeded {
			return ErrPartyExists
		}
		return nil
	}
	creator := PartyCreatorKey(p.Tenant, p.Creator)
	// First as if the creator had no open party (the usual case: one
	// transaction); the failure branch reads what it has.
	creatorRev, previous := int64(0), ""
	for attempt := range maxCreatorRaces {
		cmps := []*pb.Compare{cmpCreated(key, 0), cmpCreated(creator, 0)}
		then := []*pb.RequestOp{opPut(key, p.value(), lease), opPut(creator, p.Code, lease)}
		if creatorRev != 0 {
			cmps[1] = cmpModified(creator, creatorRev)
			if previous != p.Code {
				then = append(then, opDelete(PartyKey(p.Tenant, previous)))
			}
		}
		it := newTxnItem(lease, cmps, then, []*pb.RequestOp{opCount(key), opGet(creator)})
		it.admission = attempt == 0 // a retry is no new call: it is not refused for the queue's length
		if err := c.committer().do(ctx, it); err != nil {
			return err
		}
		if it.resp.Succeeded {
			return nil
		}
		if it.resp.Responses[0].GetResponseRange().Count > 0 {
			return ErrPartyExists
		}
		creatorRev, previous = 0, ""
		if kvs := it.resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			creatorRev, previous = kvs[0].ModRevision, string(kvs[0].Value)
		}
	}
	// Only the creator's own calls change its key: this many at once.
	return ErrBusy
}

// maxCreatorRaces bounds CreateParty's attempts when other calls of the
// same creator keep replacing its party meanwhile. Each failed attempt is
// another call's success, so only a creator calling many times at once
// (which the gateway's rate limit prevents) comes near it.
const maxCreatorRaces = 64

// PartyMismatch is JoinParty's error for a party created for another mode
// or size than the member asked for; errors.Is(err, ErrPartyMismatch).
type PartyMismatch struct {
	Mode string // the party's
	Size int
}

// ErrPartyMismatch: the party is for another mode or size (PartyMismatch).
var ErrPartyMismatch = errors.New("clusterstate: the party is for another mode or size")

func (e *PartyMismatch) Error() string {
	return fmt.Sprintf("clusterstate: the party is for mode %q with %d players", e.Mode, e.Size)
}

func (e *PartyMismatch) Is(target error) bool { return target == ErrPartyMismatch }

// PartyMember is a member streaming FindMatch with a party's code.
type PartyMember struct {
	QueuedMember
	Token string `json:"token"` // the member's search token
	// Mod and create revisions of the member's key, when read.
	Rev       int64 `json:"-"`
	CreateRev int64 `json:"-"`
}

// Joined is a member's place in a party (JoinParty).
type Joined struct {
	// Slot is the member's place in join order (PartyMember.Slot).
	Slot int
	// Rev is the revision of the write: the member key's create revision,
	// and results with a higher mod revision are this search's.
	Rev int64
	// Members are the party's members (Roster) as of Rev, the new one
	// included: PartyFollower.Watch goes on from there.
	Members []PartyMember
}

// JoinParty puts m in the party p names (its Tenant, Code, and the Mode and
// Size the member asks for), bound to lease, and takes the member's search
// key with m.Token. It returns the member's place and the party as of the
// write, or ErrAlreadySearching, ErrNoParty, *PartyMismatch, ErrPartyFull or
// ErrBusy (as Enqueue).
//
// A member's key is named for its account, and one flat transaction checks
// the party's mode and size and the account's search key, puts both keys
// and reads the party's members back. Nothing in it can stop more than Size
// members joining at once, so the party is its first Size members in join
// order (Roster: by create revision): a member that finds itself after them
// takes its keys back and gets ErrPartyFull. Every join of a party has a
// revision of its own: a group commit never holds two joins of one party
// (each counts the party key as a key it touches), since the nested
// transactions of one group share a revision and the earlier ones would
// not see the later ones' members. So the members a join reads are every
// member before it, and a member that finds itself among the first Size
// stays there (until one before it leaves, which ends the party's search
// anyway). Members keyed by slot needed a chain
// of nested transactions, one per slot, for the same guarantee; the joins
// of parties were half of the matchmaker's compares and operations in etcd,
// which decodes each of them twice (docs/RATIONALE.md).
func (c *Client) JoinParty(ctx context.Context, lease *Lease, p Party, m PartyMember) (Joined, error) {
	search := SearchKey(p.Tenant, m.AccountID)
	party := PartyKey(p.Tenant, p.Code)
	key := PartyMemberKey(p.Tenant, p.Code, m.AccountID)
	m.Slot = 0 // the order of the keys says which place it is
	b := encodePartyMember(m)
	want := p.value()
	for reread := false; ; {
		it := newTxnItem(lease.ID(),
			[]*pb.Compare{cmpValue(party, want), cmpCreated(search, 0)},
			[]*pb.RequestOp{
				opPut(key, b, lease.ID()),
				opPut(search, m.Token, lease.ID()),
				opGetPrefix(PartyMembersPrefix(p.Tenant, p.Code)),
			},
			[]*pb.RequestOp{opGet(party), opCount(search)})
		it.keys = append(it.keys, party) // no two joins of the party in one group (above)
		it.admission = true
		if err := c.committer().do(ctx, it); err != nil {
			return Joined{}, err
		}
		if !it.resp.Succeeded {
			kvs := it.resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return Joined{}, ErrNoParty
			}
			var v partyValue
			if err := json.Unmarshal(kvs[0].Value, &v); err != nil {
				return Joined{}, fmt.Errorf("clusterstate: party %s: %w", p.Code, err)
			}
			if v.Mode != p.Mode || v.Size != p.Size {
				return Joined{}, &PartyMismatch{Mode: v.Mode, Size: v.Size}
			}
			if string(kvs[0].Value) != want && !reread {
				// The same party, encoded otherwise (by another version):
				// compare what is there.
				want, reread = string(kvs[0].Value), true
				continue
			}
			return Joined{}, ErrAlreadySearching
		}
		var all []PartyMember
		for _, kv := range it.resp.Responses[2].GetResponseRange().Kvs {
			if pm, ok := decodePartyMember(kv); ok {
				all = append(all, pm)
			}
		}
		members := inJoinOrder(all)
		members = members[:min(len(members), max(p.Size, 0))]
		for _, pm := range members {
			if pm.AccountID == m.AccountID && pm.CreateRev == it.rev {
				return Joined{Slot: pm.Slot, Rev: it.rev, Members: members}, nil
			}
		}
		// After the party's first Size members: the party is full. The keys
		// go even if ctx has ended: the search key left behind would keep
		// the account from searching for as long as the lease lives.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := c.EndSearch(lctx, p.Tenant, m.AccountID, m.Token, key); err != nil {
			return Joined{}, fmt.Errorf("clusterstate: party %s is full, and leaving it failed: %w", p.Code, err)
		}
		return Joined{}, ErrPartyFull
	}
}

func decodePartyMember(kv *mvccpb.KeyValue) (PartyMember, bool) {
	m, ok := decodePartyMemberValue(kv.Value)
	if !ok || m.AccountID != lastSegment(string(kv.Key)) {
		return m, false
	}
	m.Rev, m.CreateRev = kv.ModRevision, kv.CreateRevision
	return m, true
}

// Roster returns a party's members, its first size in join order (create
// revision; then account, for a deterministic order should two ever share
// one), each with its Slot: its place in that order.
// Those who joined after them are not in the party (JoinParty). ms is
// left as it is.
func Roster(ms []PartyMember, size int) []PartyMember {
	ms = inJoinOrder(slices.Clone(ms))
	return ms[:min(len(ms), max(size, 0))]
}

// inJoinOrder sorts ms in join order, in place, and sets each one's Slot.
// The lists this package returns are in that order (Joined.Members,
// PartyMembers, PartyFollower.Watch), so their first size are the party.
func inJoinOrder(ms []PartyMember) []PartyMember {
	slices.SortFunc(ms, func(a, b PartyMember) int {
		return cmp.Or(cmp.Compare(a.CreateRev, b.CreateRev), strings.Compare(a.AccountID, b.AccountID))
	})
	for i := range ms {
		ms[i].Slot = i
	}
	return ms
}

// PartyMembers reads a party's members now (all of them, in join order: see
// Roster), and the revision read.
func (c *Client) PartyMembers(ctx context.Context, tenant, code string) ([]PartyMember, int64, error) {
	resp, err := c.cli.Get(ctx, PartyMembersPrefix(tenant, code), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	var out []PartyMember
	for _, kv := range resp.Kvs {
		if m, ok := decodePartyMember(kv); ok {
			out = append(out, m)
		}
	}
	return inJoinOrder(out), resp.Header.Revision, nil
}

// Party watches. Every member of a party follows its party's members (who
// joins, who leaves, whether the party was settled). One etcd watch per
// member would start behind the store's revision (it starts at the member's
// join), and etcd catches such a watcher up from its backend, reading every
// change since: at thousands of joins a second that costs etcd more than
// the joins. So the members on one Client share one watch of every party's
// members, kept from the first follower until the client closes, and each
// follower takes the changes of its party (FollowParty).

// PartyFollower follows one party's members for one member: FollowParty,
// then JoinParty, then Watch.
type PartyFollower struct {
	hub    *partyHub
	prefix string

	mu      sync.Mutex
	events  []partyEvent  // of this party, in revision order, not yet watched
	broken  bool          // the shared watch missed changes (a compaction)
	changed chan struct{} // signalled when events or broken change
}

// FollowParty starts following a party's members. Call it before joining
// the party: every change after the join is then seen. Stop ends it.
func (c *Client) FollowParty(ctx context.Context, tenant, code string) (*PartyFollower, error) {
	h := c.partyHub()
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f := &PartyFollower{hub: h, prefix: PartyMembersPrefix(tenant, code), changed: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.followers[f.prefix] == nil {
		h.followers[f.prefix] = map[*PartyFollower]struct{}{}
	}
	h.followers[f.prefix][f] = struct{}{}
	h.mu.Unlock()
	return f, nil
}

// Stop stops following.
func (f *PartyFollower) Stop() {
	h := f.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.followers[f.prefix], f)
	if len(h.followers[f.prefix]) == 0 {
		delete(h.followers, f.prefix)
	}
}

// Watch calls fn with the party's members (all of them, in join order: see
// Roster) after every revision
// after rev that changes them, starting from members (the party as of rev:
// Joined), in order and none skipped, until fn returns false (nil), ctx
// ends (ctx's error) or the shared watch missed changes (an error: the
// caller cannot know who is there any more). A settlement deletes every
// member's key at one revision, so fn sees them all leave at once.
func (f *PartyFollower) Watch(ctx context.Context, rev int64, members []PartyMember, fn func(members []PartyMember) bool) error {
	byKey := map[string]PartyMember{}
	for _, m := range members {
		byKey[f.prefix+m.AccountID] = m
	}
	for {
		f.mu.Lock()
		evs, broken := f.events, f.broken
		f.events = nil
		f.mu.Unlock()
		for i, ev := range evs {
			if ev.rev <= rev {
				continue // before the party as given
			}
			switch {
			case !ev.put:
				delete(byKey, ev.key)
			case ev.ok:
				byKey[ev.key] = ev.m
			}
			if i+1 < len(evs) && evs[i+1].rev == ev.rev {
				continue // the rest of this revision first
			}
			list := make([]PartyMember, 0, len(byKey))
			for _, m := range byKey {
				list = append(list, m)
			}
			if !fn(inJoinOrder(list)) {
				return nil
			}
		}
		if broken {
			return errors.New("clusterstate: the party watch missed changes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.changed:
		}
	}
}

func (f *PartyFollower) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// partyHub is the one watch of every party's members on a client.
type partyHub struct {
	cli       *clientv3.Client
	ready     chan struct{} // closed once the watch is in place
	mu        sync.Mutex
	followers map[string]map[*PartyFollower]struct{} // by party members prefix
}

// partyHub returns the client's party watch, started on first use; it runs
// until the etcd client closes.
func (c *Client) partyHub() *partyHub {
	c.hubOnce.Do(func() {
		c.hub = &partyHub{cli: c.cli, ready: make(chan struct{}), followers: map[string]map[*PartyFollower]struct{}{}}
		go c.hub.run(c.cli.Ctx())
	})
	return c.hub
}

// run watches every party's members until ctx (the client's) ends. A watch
// that breaks is taken up again after the last revision seen, so no change
// is missed; if etcd compacted that revision away, every follower is told.
func (h *partyHub) run(ctx context.Context) {
	prefix := partyMembersRoot()
	var last int64 // the last revision seen; 0 before the first watch is in place
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if last > 0 {
			opts = append(opts, clientv3.WithRev(last+1))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range h.cli.Watch(wctx, prefix, opts...) {
			if wr.CompactRevision != 0 {
				h.breakAll()
				last = 0
				break
			}
			if wr.Err() != nil || wr.Canceled {
				break
			}
			if wr.Created && last == 0 {
				last = wr.Header.Revision
				select {
				case <-h.ready:
				default:
					close(h.ready)
				}
				continue
			}
			h.dispatch(wr.Events)
			last = max(last, seenUpTo(wr))
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// partyEvent is a change of a party member's key, decoded once for all the
// followers of the party on the client.
type partyEvent struct {
	key string
	rev int64 // mod revision
	put bool  // else a deletion
	m   PartyMember
	ok  bool // a put whose value decoded
}

// dispatch hands each event to the followers of its party. Every replica
// hears every party's changes, most of them of parties it has no member of:
// those are dropped before any decoding.
func (h *partyHub) dispatch(evs []*clientv3.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range evs {
		key := ev.Kv.Key
		fs := h.followers[string(key[:bytes.LastIndexByte(key, '/')+1])] // no copy of the key to look it up
		if len(fs) == 0 {
			continue
		}
		pe := partyEvent{key: string(key), rev: ev.Kv.ModRevision, put: ev.Type == mvccpb.PUT}
		if pe.put {
			pe.m, pe.ok = decodePartyMember(ev.Kv)
		}
		for f := range fs {
			f.mu.Lock()
			f.events = append(f.events, pe)
			f.mu.Unlock()
			f.signal()
		}
	}
}

func (h *partyHub) breakAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fs := range h.followers {
		for f := range fs {
			f.mu.Lock()
			f.broken = true
			f.mu.Unlock()
			f.signal()
		}
	}
}

// QueuePartyTicket puts a full party's ticket in its queue, bound to lease,
// if no ticket has its id yet and every member is still in the party as
// read (QueuedMember.MemberRev). It reports whether this call queued it (false:
// another member's call did, or a member left).
func (c *Client) QueuePartyTicket(ctx context.Context, lease *Lease, t QueuedTicket) (bool, error) {
	b := encodeTicket(t)
	key := TicketKey(t.Tenant, t.Mode, t.ID)
	cmps := []*pb.Compare{cmpCreated(key, 0)}
	for _, m := range t.Members {
		cmps = append(cmps, cmpModified(PartyMemberKey(t.Tenant, t.Party, m.AccountID), m.MemberRev))
	}
	it := newTxnItem(lease.ID(), cmps, []*pb.RequestOp{opPut(key, b, lease.ID())}, nil)
	if err := c.committer().do(ctx, it); err != nil {
		return false, err
	}
	return it.resp.Succeeded, nil
}

// DropDeadPartyTicket deletes a party ticket that no settlement can ever
// take: it is unchanged since read (t.Rev), and one of its members' keys no
// longer has the revision the ticket names (QueuedMember.MemberRev), because
// that member left, or left and joined again. (A member key is never
// written twice, so the ticket cannot come alive again.) It reports whether
// it deleted the ticket; a ticket of one player is never dropped. No
// search key is touched: they belong to the players' current searches.
func (c *Client) DropDeadPartyTicket(ctx context.Context, t QueuedTicket) (bool, error) {
	if t.Party == "" {
		return false, nil
	}
	key := TicketKey(t.Tenant, t.Mode, t.ID)
	for _, m := range t.Members {
		mk := PartyMemberKey(t.Tenant, t.Party, m.AccountID)
		if t.slotKeyed {
			mk = legacyPartySlotKey(t.Tenant, t.Party, m.Slot)
		}
		resp, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(key), "=", t.Rev),
			clientv3.Compare(clientv3.ModRevision(mk), "!=", m.MemberRev),
		).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			return true, nil
		}
	}
	return false, nil
}

// PartyTicketID is the id of the ticket a party's members queue once all
// are in: the same for all of them (the code and the newest member key's
// create revision), new for every assembly of the party.
func PartyTicketID(code string, members []PartyMember) string {
	var newest int64
	for _, m := range members {
		newest = max(newest, m.CreateRev)
	}
	return code + "-" + strings.ToLower(strconv.FormatInt(newest, 36))
}

// Group commit.
//
// The matchmaker writes many small transactions (a ticket queued, a party
// joined, a match settled), each with compares of its own. Committed one by
// one, each pays a gRPC round trip, a raft proposal and an apply; etcd's
// cost is per request far more than per key. So the writes of concurrent
// callers of one Client are committed together: one transaction whose Then
// holds each caller's transaction nested. etcd evaluates a nested
// transaction's compares on their own, so one caller's failed compare (an
// account already searching, a ticket that changed) takes its Else branch
// and leaves the others be; the group has one revision. While a group is in
// flight the next one gathers, so the groups grow with the load and a lone
// write is committed at once. A caller whose write is still waiting when its
// ctx ends withdraws it; once sent, its outcome is final and the caller
// waits for it (at most groupCommitTimeout).
//
// etcd limits a transaction to maxTxnOps operations per level, and a nested
// transaction may use only what its parent's own operations left; a group
// is sized to fit, and a transaction too large to nest is committed alone.
// Writes of one group must touch distinct keys (etcd refuses a transaction
// that writes a key twice); a write touching a key of an earlier waiting
// write waits for the next group, so writes of one key keep their order.
// etcd refuses a whole transaction when a lease one of its puts names has
// expired; a group whose writes name different leases is then committed
// again one write at a time, so only the writes of the dead lease fail.

const (
	maxTxnOps          = 128     // etcd's default --max-txn-ops (MaxSeats in package matchmaker assumes it too)
	maxGroupBytes      = 1 << 20 // well under etcd's default 1.5 MiB request limit
	maxGroupsInFlight  = 2
	groupCommitTimeout = 5 * time.Second
	// maxAdmissionWait: when the oldest waiting write has waited longer,
	// etcd is not keeping up; a write that starts a search is refused
	// (ErrBusy) instead of queued behind the others, so the wait stays
	// bounded and the writes already waiting (settlements first) go
	// through. Writes that end searches are never refused.
	maxAdmissionWait = 2 * time.Second
)

// txnItem is one caller's transaction in a group, and its outcome.
type txnItem struct {
	cmps      []*pb.Compare
	then, els []*pb.RequestOp
	lease     int64    // the lease its puts are bound to; 0 for none
	need      int      // operation budget it needs: its own plus its deepest nested transaction's
	keys      []string // keys it writes, on either branch
	bytes     int
	alone     bool      // commit it as a transaction of its own
	urgent    bool      // commit it before the writes that are not
	admission bool      // it starts a search: refused (ErrBusy) when writes wait too long
	queuedAt  time.Time // when it started waiting
	done      chan struct{}
	resp      *clientv3.TxnResponse // its own transaction's response
	rev       int64                 // the revision of the commit
	err       error
	groupSize int // how many items the transaction that committed it held
}

func newTxnItem(lease int64, cmps []*pb.Compare, then, els []*pb.RequestOp) *txnItem {
	it := &txnItem{cmps: cmps, then: then, els: els, lease: lease, done: make(chan struct{})}
	it.need = it.measure(cmps, then, els)
	it.alone = it.alone || it.need > maxTxnOps/2
	return it
}

// measure adds the keys and bytes of a transaction's writes to it and
// returns the operation budget the transaction needs.
func (it *txnItem) measure(cmps []*pb.Compare, then, els []*pb.RequestOp) int {
	for _, c := range cmps {
		it.bytes += len(c.Key) + len(c.GetValue()) + 16
	}
	sub := 0
	for _, ops := range [2][]*pb.RequestOp{then, els} {
		for _, op := range ops {
			it.bytes += 16
			switch r := op.Request.(type) {
			case *pb.RequestOp_RequestTxn:
				t := r.RequestTxn
				sub = max(sub, it.measure(t.Compare, t.Success, t.Failure))
			case *pb.RequestOp_RequestPut:
				it.bytes += len(r.RequestPut.Key) + len(r.RequestPut.Value)
				it.keys = append(it.keys, string(r.RequestPut.Key))
			case *pb.RequestOp_RequestDeleteRange:
				it.bytes += len(r.RequestDeleteRange.Key)
				if len(r.RequestDeleteRange.RangeEnd) > 0 {
					it.alone = true // a range of keys: no telling what it overlaps
				}
				it.keys = append(it.keys, string(r.RequestDeleteRange.Key))
			case *pb.RequestOp_RequestRange:
				it.bytes += len(r.RequestRange.Key)
			}
		}
	}
	return max(len(cmps), len(then), len(els)) + sub
}

// groupCommitter commits the transactions of one etcd client in groups.
type groupCommitter struct {
	kv pb.KVClient // the client's connection, as its KV uses it
	mu sync.Mutex
	// Waiting writes: urgent ones (settlements, which empty the queue) go
	// first, so that a flood of new tickets cannot hold up the matches
	// that would make room for them.
	urgent, pending []*txnItem
	inFlight        int
}

// committer returns the client's groupCommitter, made on first use.
func (c *Client) committer() *groupCommitter {
	c.commitOnce.Do(func() { c.commits = &groupCommitter{kv: clientv3.RetryKVClient(c.cli)} })
	return c.commits
}

// do commits it with the group it lands in and returns the group's error
// (it.resp and it.rev hold its own outcome).
func (g *groupCommitter) do(ctx context.Context, it *txnItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	queue := &g.pending
	if it.urgent {
		queue = &g.urgent
	}
	it.queuedAt = time.Now()
	g.mu.Lock()
	if it.admission && g.waitedLocked(it.queuedAt) > maxAdmissionWait {
		g.mu.Unlock()
		return ErrBusy
	}
	*queue = append(*queue, it)
	g.startLocked()
	g.mu.Unlock()
	select {
	case <-it.done:
		return it.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(*queue, it); i >= 0 { // not sent: withdraw it
		*queue = slices.Delete(*queue, i, i+1)
		g.mu.Unlock()
		return ctx.Err()
	}
	g.mu.Unlock()
	<-it.done // sent: its outcome is final
	return it.err
}

// waitedLocked is how long the oldest waiting write has waited by now.
func (g *groupCommitter) waitedLocked(now time.Time) time.Duration {
	var d time.Duration
	for _, q := range [][]*txnItem{g.urgent, g.pending} {
		if len(q) > 0 {
			d = max(d, now.Sub(q[0].queuedAt))
		}
	}
	return d
}

// startLocked sends groups while fewer than maxGroupsInFlight are in flight.
func (g *groupCommitter) startLocked() {
	for g.inFlight < maxGroupsInFlight && len(g.urgent)+len(g.pending) > 0 {
		group := g.takeLocked()
		g.inFlight++
		go g.commit(group)
	}
}

// takeLocked takes the next group from the waiting writes, urgent ones
// first, each kind in order: as many as fit in one transaction, none
// writing a key an earlier waiting write touches. It takes at least one.
func (g *groupCommitter) takeLocked() []*txnItem {
	var group []*txnItem
	touched := map[string]bool{}
	need, bytes := 0, 0
	full := false
	take := func(waiting []*txnItem) []*txnItem {
		var rest []*txnItem
		for i, it := range waiting {
			if full {
				return append(rest, waiting[i:]...)
			}
			fits := !slices.ContainsFunc(it.keys, func(k string) bool { return touched[k] })
			if fits && len(group) > 0 {
				fits = !it.alone && !group[0].alone && len(group)+1+max(need, it.need) <= maxTxnOps &&
					bytes+it.bytes <= maxGroupBytes
				full = !fits && len(group)+1+max(need, it.need) > maxTxnOps
			}
			for _, k := range it.keys {
				touched[k] = true
			}
			if !fits {
				rest = append(rest, it)
				continue
			}
			group = append(group, it)
			need, bytes = max(need, it.need), bytes+it.bytes
			full = full || it.alone
		}
		return rest
	}
	g.urgent = take(g.urgent)
	g.pending = take(g.pending)
	return group
}

// commit commits a group and starts the next one.
func (g *groupCommitter) commit(group []*txnItem) {
	g.commitGroup(group)
	g.mu.Lock()
	g.inFlight--
	g.startLocked()
	g.mu.Unlock()
}

// commitGroup commits a group: one transaction holding each item's
// transaction nested (or the item's own, alone), and closes their done.
func (g *groupCommitter) commitGroup(group []*txnItem) {
	if len(group) == 1 {
		g.commitAlone(group[0])
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
		ops := make([]*pb.RequestOp, len(group))
		for i, it := range group {
			ops[i] = opTxn(it.cmps, it.then, it.els)
		}
		resp, err := commitTxn(ctx, g.kv, &pb.TxnRequest{Success: ops})
		cancel()
		switch {
		case err == nil:
			for i, it := range group {
				it.resp = (*clientv3.TxnResponse)(resp.Responses[i].GetResponseTxn())
				it.rev, it.groupSize = resp.Header.Revision, len(group)
			}
		case refusedWhole(err) && !(errors.Is(err, rpctypes.ErrLeaseNotFound) && oneLease(group)):
			// Nothing was written, and the fault is one write's: commit
			// each alone so that only its caller sees it.
			for _, it := range group {
				g.commitAlone(it)
			}
		default:
			for _, it := range group {
				it.err = err
			}
		}
	}
	for _, it := range group {
		close(it.done)
	}
}

func (g *groupCommitter) commitAlone(it *txnItem) {
	ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
	defer cancel()
	resp, err := commitTxn(ctx, g.kv, &pb.TxnRequest{Compare: it.cmps, Success: it.then, Failure: it.els})
	if err != nil {
		it.err = err
		return
	}
	it.resp, it.rev, it.groupSize = resp, resp.Header.Revision, 1
}

// refusedWhole reports whether etcd refused a transaction before applying
// any of it, for a fault of one of its writes.
func refusedWhole(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrDuplicateKey) ||
		errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge)
}

func oneLease(group []*txnItem) bool {
	for _, it := range group[1:] {
		if it.lease != group[0].lease {
			return false
		}
	}
	return true
}

// Values.
//
// Tickets, party members and results are stored in a compact binary
// encoding rather than JSON: each is written once and decoded by every
// replica that follows it (a party member's key by each replica with a
// member of the party, a ticket by the queue's leader), and encoding/json
// with its reflection and the members' RTT maps was a tenth of the
// matchmaker's CPU. A value is valueVersion (a ticket's, ticketVersion), then its fields in order:
// strings and byte strings as a uvarint length and the bytes, counts and
// slots as uvarints, revisions and times (Unix nanoseconds) as varints,
// ratings and RTTs as IEEE 754 doubles, little-endian. A value that starts
// with '{' is JSON, as written before (QueuedTicket's and PartyMember's
// JSON tags, results as a JSON object of base64 values); it is still read,
// so that replicas of the two kinds can share a queue while they are
// upgraded one at a time (the older kind skips the newer values: those
// tickets wait for the upgrade of the queue's leader).

const valueVersion = 1

// ticketVersion is the first byte of a ticket's value: 2 since a party's
// members are keyed by account (party-accounts), 1 (valueVersion) before,
// by slot. Versions before this one refuse a 2, so an older leader leaves
// such tickets out; this one reads both (QueuedTicket.slotKeyed).
const ticketVersion = 2

type valueWriter struct{ b []byte }

func (w *valueWriter) str(s string)   { w.b = append(binary.AppendUvarint(w.b, uint64(len(s))), s...) }
func (w *valueWriter) bytes(b []byte) { w.b = append(binary.AppendUvarint(w.b, uint64(len(b))), b...) }
func (w *valueWriter) uint(x int)     { w.b = binary.AppendUvarint(w.b, uint64(max(x, 0))) }
func (w *valueWriter) int(x int64)    { w.b = binary.AppendVarint(w.b, x) }
func (w *valueWriter) float(f float64) {
	w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(f))
}

func (w *valueWriter) member(m QueuedMember) {
	w.str(m.AccountID)
	w.str(m.Replica)
	w.float(m.Rating)
	w.uint(len(m.RTT))
	for region, ms := range m.RTT {
		w.str(region)
		w.float(ms)
	}
	w.uint(m.Slot)
	w.int(m.MemberRev)
}

// valueReader reads a value; bad is set, and the rest reads as zeros, once
// it runs short.
type valueReader struct {
	b   []byte
	bad bool
}

func (r *valueReader) fail() { r.b, r.bad = nil, true }

func (r *valueReader) uint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *valueReader) int() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *valueReader) raw() []byte {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *valueReader) str() string { return string(r.raw()) }

func (r *valueReader) float() float64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return f
}

// count reads a count of items of at least size bytes each: no more than
// what is left could hold, so a corrupt count cannot allocate much.
func (r *valueReader) count(size int) int {
	n := r.uint()
	if n > uint64(len(r.b)/size) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *valueReader) member() QueuedMember {
	m := QueuedMember{AccountID: r.str(), Replica: r.str(), Rating: r.float()}
	n := r.count(9) // a region: its length, and 8 bytes of RTT
	m.RTT = make(map[string]float64, n)
	for range n {
		region := r.str()
		m.RTT[region] = r.float()
	}
	m.Slot = int(min(r.uint(), math.MaxInt32))
	m.MemberRev = r.int()
	return m
}

// done reports whether the value was read whole, and had nothing after.
func (r *valueReader) done() bool { return !r.bad && len(r.b) == 0 }

// newValueReader starts reading a binary value; ok is false for another
// version (or none).
func newValueReader(v []byte) (*valueReader, bool) {
	if len(v) == 0 || v[0] != valueVersion {
		return nil, false
	}
	return &valueReader{b: v[1:]}, true
}

// newTicketReader is newValueReader for tickets (ticketVersion), and says
// whether the value is of the version before.
func newTicketReader(v []byte) (r *valueReader, old, ok bool) {
	if len(v) == 0 || (v[0] != ticketVersion && v[0] != valueVersion) {
		return nil, false, false
	}
	return &valueReader{b: v[1:]}, v[0] == valueVersion, true
}

func isJSON(v []byte) bool { return len(v) > 0 && v[0] == '{' }

func encodeTicket(t QueuedTicket) string {
	w := valueWriter{b: make([]byte, 0, 64+len(t.Members)*64)}
	w.b = append(w.b, ticketVersion)
	w.str(t.ID)
	w.str(t.Tenant)
	w.str(t.Mode)
	w.str(t.Party)
	w.int(t.Enqueued.UnixNano())
	w.uint(len(t.Members))
	for _, m := range t.Members {
		w.member(m)
	}
	return string(w.b)
}

func decodeTicket(v []byte) (QueuedTicket, bool) {
	var t QueuedTicket
	if isJSON(v) {
		ok := json.Unmarshal(v, &t) == nil
		t.slotKeyed = t.Party != ""
		return t, ok
	}
	r, old, ok := newTicketReader(v)
	if !ok {
		return t, false
	}
	t.ID, t.Tenant, t.Mode, t.Party = r.str(), r.str(), r.str(), r.str()
	t.slotKeyed = old && t.Party != ""
	t.Enqueued = time.Unix(0, r.int())
	n := r.count(13) // a member: two lengths, a rating, a count, a slot and a revision
	t.Members = make([]QueuedMember, 0, n)
	for range n {
		t.Members = append(t.Members, r.member())
	}
	return t, r.done()
}

func encodePartyMember(m PartyMember) string {
	w := valueWriter{b: make([]byte, 0, 96)}
	w.b = append(w.b, valueVersion)
	w.member(m.QueuedMember)
	w.str(m.Token)
	return string(w.b)
}

// decodePartyMemberValue decodes a party member's value (not the fields its
// key gives: slot and revisions).
func decodePartyMemberValue(v []byte) (PartyMember, bool) {
	var m PartyMember
	if isJSON(v) {
		return m, json.Unmarshal(v, &m) == nil
	}
	r, ok := newValueReader(v)
	if !ok {
		return m, false
	}
	m.QueuedMember = r.member()
	m.Token = r.str()
	return m, r.done()
}

// encodeResults encodes a settlement's results for one replica, by account.
func encodeResults(results map[string][]byte) string {
	w := valueWriter{b: []byte{valueVersion}}
	w.uint(len(results))
	for account, v := range results {
		w.str(account)
		w.bytes(v)
	}
	return string(w.b)
}

func decodeResults(v []byte) (map[string][]byte, bool) {
	if isJSON(v) {
		var results map[string][]byte
		return results, json.Unmarshal(v, &results) == nil
	}
	r, ok := newValueReader(v)
	if !ok {
		return nil, false
	}
	n := r.count(2) // two lengths
	results := make(map[string][]byte, n)
	for range n {
		account := r.str()
		results[account] = r.raw()
	}
	return results, r.done()
}
