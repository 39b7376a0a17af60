package clusterstate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Matchmaking state (package matchmaker). Key layout, under Prefix:
//
//	/ludus/mm/rules/{tenant}/{mode}              a queue's rules (the matchmaker's JSON); no lease
//	/ludus/mm/tickets/{tenant}/{mode}/{ticket}   QueuedTicket JSON, bound to the lease of the
//	                                             replica holding the stream that queued it; its
//	                                             mod revision is compared when it is settled
//	/ludus/mm/accounts/{tenant}/{account}        the token of the account's one search in the
//	                                             tenant (any mode), bound to the replica's lease
//	/ludus/mm/parties/{tenant}/{code}            Party JSON, bound to the party's own lease (15 min)
//	/ludus/mm/party-members/{tenant}/{code}/{slot}
//	                                             PartyMember JSON, bound to the member's replica lease
//	/ludus/mm/results/{replica}/{tenant}/{account}
//	                                             a search's outcome for the stream on replica (the
//	                                             matchmaker's JSON), bound to a short results lease
//	/ludus/elections/mm/{tenant}/{mode}/{lease}  candidates for leading the queue (Campaign)
//
// The queue's leader settles tickets (matched, timed out) in one transaction
// fenced on its leader key, each ticket's mod revision and each party
// member's key: a ticket that left, or changed, or a leader that lost its
// term, makes the whole settlement fail, so no ticket is matched twice and
// none is dropped.

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
func PartyMembersPrefix(tenant, code string) string {
	return mmPrefix() + "party-members/" + tenant + "/" + code + "/"
}
func PartyMemberKey(tenant, code string, slot int) string {
	return PartyMembersPrefix(tenant, code) + strconv.Itoa(slot)
}
func ResultsPrefix(replica string) string { return mmPrefix() + "results/" + replica + "/" }
func ResultKey(replica, tenant, account string) string {
	return ResultsPrefix(replica) + tenant + "/" + account
}

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
}

// QueuedMember is one player of a ticket.
type QueuedMember struct {
	AccountID string             `json:"account"`
	Replica   string             `json:"replica"` // where the player's stream is: results go there
	Rating    float64            `json:"rating"`
	RTT       map[string]float64 `json:"rtt"`
	// In a party: the member's slot and its key's mod revision, compared
	// when the ticket is queued and settled.
	Slot      int   `json:"slot,omitempty"`
	MemberRev int64 `json:"member_rev,omitempty"`
}

// PutMatchRules stores a queue's rules (opaque to clusterstate).
func (c *Client) PutMatchRules(ctx context.Context, tenant, mode string, rules []byte) error {
	_, err := c.cli.Put(ctx, MatchRulesKey(tenant, mode), string(rules))
	return err
}

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

// WatchMatchQueues calls fn for every queue with rules (present) and for
// every queue whose rules are deleted (!present), first for those there now,
// then as they change, until ctx ends. After a broken watch it reads them
// all again (fn may then hear of a queue twice).
func (c *Client) WatchMatchQueues(ctx context.Context, fn func(tenant, mode string, present bool)) {
	split := func(k []byte) (string, string, bool) {
		return splitGameKey(string(k), MatchRulesPrefix())
	}
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, MatchRulesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err == nil {
			for _, kv := range resp.Kvs {
				if t, m, ok := split(kv.Key); ok {
					fn(t, m, true)
				}
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range c.cli.Watch(wctx, MatchRulesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil || wr.Canceled {
					break
				}
				for _, ev := range wr.Events {
					if t, m, ok := split(ev.Kv.Key); ok {
						fn(t, m, ev.Type == mvccpb.PUT)
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

// Queue is one read of a queue: its rules and tickets at one revision.
type Queue struct {
	Rules   []byte // nil when the queue has no rules
	Tickets []QueuedTicket
	Rev     int64
}

// ReadQueue reads a queue's rules and tickets at one revision. Tickets whose
// value does not decode are skipped (and stay until their lease ends).
func (c *Client) ReadQueue(ctx context.Context, tenant, mode string) (Queue, error) {
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(MatchRulesKey(tenant, mode)),
		clientv3.OpGet(TicketsPrefix(tenant, mode), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Queue{}, err
	}
	q := Queue{Rev: resp.Header.Revision}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		q.Rules = kvs[0].Value
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var t QueuedTicket
		if json.Unmarshal(kv.Value, &t) != nil {
			continue
		}
		// The key, not the value, says which ticket it is.
		t.Tenant, t.Mode, t.ID, t.Rev = tenant, mode, lastSegment(string(kv.Key)), kv.ModRevision
		q.Tickets = append(q.Tickets, t)
	}
	return q, nil
}

// CountTickets returns how many tickets a queue holds.
func (c *Client) CountTickets(ctx context.Context, tenant, mode string) (int, error) {
	resp, err := c.cli.Get(ctx, TicketsPrefix(tenant, mode), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// Enqueue puts a one-player ticket in its queue, bound to lease, and takes
// the player's search key with token (ErrAlreadySearching if the player is
// searching already). It deletes a stale result of the player on this
// replica, and returns the revision of the write: results with a higher mod
// revision are this search's.
func (c *Client) Enqueue(ctx context.Context, lease *Lease, t QueuedTicket, token string) (int64, error) {
	if len(t.Members) != 1 {
		return 0, fmt.Errorf("clusterstate: Enqueue takes a one-player ticket, got %d players", len(t.Members))
	}
	m := t.Members[0]
	b, err := json.Marshal(t)
	if err != nil {
		return 0, err
	}
	search := SearchKey(t.Tenant, m.AccountID)
	ticket := TicketKey(t.Tenant, t.Mode, t.ID)
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(search), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(ticket), "=", 0),
	).Then(
		clientv3.OpPut(search, token, clientv3.WithLease(clientv3.LeaseID(lease.ID()))),
		clientv3.OpPut(ticket, string(b), clientv3.WithLease(clientv3.LeaseID(lease.ID()))),
		clientv3.OpDelete(ResultKey(m.Replica, t.Tenant, m.AccountID)),
	).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, ErrAlreadySearching
	}
	return resp.Header.Revision, nil
}

// EndSearch ends an account's search: it deletes keys (the search's ticket,
// its party member key; any may be gone already) and the account's search
// key if it still holds token (a newer search of the account keeps its own).
func (c *Client) EndSearch(ctx context.Context, tenant, account, token string, keys ...string) error {
	search := SearchKey(tenant, account)
	ops := make([]clientv3.Op, 0, len(keys)+1)
	for _, k := range keys {
		ops = append(ops, clientv3.OpDelete(k))
	}
	_, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(search), "=", token)).
		Then(append(ops, clientv3.OpDelete(search))...).Else(ops...).Commit()
	return err
}

// Settlement is a leader's decision about some tickets of a queue: they
// leave it, and each of their players' streams gets a result.
type Settlement struct {
	Tickets []QueuedTicket    // as read (with Rev)
	Results map[string][]byte // account id -> the result for its stream
	// ResultsLease is the lease the results are bound to (GrantResultsLease):
	// a result nobody reads vanishes with it.
	ResultsLease int64
}

// Settle commits s in one transaction fenced on l: only if l still leads,
// every ticket is unchanged since read and every party member is still in
// its slot, it deletes the tickets, their players' search keys and party
// member keys, and puts the results. Otherwise nothing is written and it
// returns ErrNotLeader or ErrTicketsChanged. It returns the commit revision.
func (c *Client) Settle(ctx context.Context, l *Leadership, s Settlement) (int64, error) {
	cmps := []clientv3.Cmp{l.fence()}
	var ops []clientv3.Op
	for _, t := range s.Tickets {
		key := TicketKey(t.Tenant, t.Mode, t.ID)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", t.Rev))
		ops = append(ops, clientv3.OpDelete(key))
		for _, m := range t.Members {
			ops = append(ops, clientv3.OpDelete(SearchKey(t.Tenant, m.AccountID)))
			if t.Party != "" {
				mk := PartyMemberKey(t.Tenant, t.Party, m.Slot)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(mk), "=", m.MemberRev))
				ops = append(ops, clientv3.OpDelete(mk))
			}
			if r, ok := s.Results[m.AccountID]; ok {
				ops = append(ops, clientv3.OpPut(ResultKey(m.Replica, t.Tenant, m.AccountID), string(r),
					clientv3.WithLease(clientv3.LeaseID(s.ResultsLease))))
			}
		}
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(l.key)).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != l.rev {
			return 0, ErrNotLeader
		}
		return 0, ErrTicketsChanged
	}
	return resp.Header.Revision, nil
}

// GrantResultsLease grants a lease for results (Settlement.ResultsLease); it
// is not kept alive: results live ttl at most.
func (c *Client) GrantResultsLease(ctx context.Context, ttl time.Duration) (int64, error) {
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

// Result returns the result for an account's stream on replica, if any.
func (c *Client) Result(ctx context.Context, replica, tenant, account string) (Result, bool, error) {
	resp, err := c.cli.Get(ctx, ResultKey(replica, tenant, account))
	if err != nil || len(resp.Kvs) == 0 {
		return Result{}, false, err
	}
	return Result{Tenant: tenant, Account: account, Value: resp.Kvs[0].Value, Rev: resp.Kvs[0].ModRevision}, true, nil
}

// WatchResults calls fn with every result put for streams on replica, first
// those there now, then as they come, until ctx ends; after a broken watch
// it reads them all again (fn may see a result twice).
func (c *Client) WatchResults(ctx context.Context, replica string, fn func(Result)) {
	prefix := ResultsPrefix(replica)
	deliver := func(kv *mvccpb.KeyValue) {
		tenant, account, ok := splitGameKey(string(kv.Key), prefix)
		if ok {
			fn(Result{Tenant: tenant, Account: account, Value: kv.Value, Rev: kv.ModRevision})
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
	Code    string    `json:"code"`
	Tenant  string    `json:"tenant"`
	Mode    string    `json:"mode"`
	Size    int       `json:"size"`
	Creator string    `json:"creator"`
	Expires time.Time `json:"expires"`
}

// CreateParty stores p under a lease of ttl; ErrPartyExists if its code is
// taken.
func (c *Client) CreateParty(ctx context.Context, p Party, ttl time.Duration) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	grant, err := c.cli.Grant(ctx, max(int64(ttl/time.Second), 1))
	if err != nil {
		return err
	}
	key := PartyKey(p.Tenant, p.Code)
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(grant.ID))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		_, _ = c.cli.Revoke(ctx, grant.ID)
		return ErrPartyExists
	}
	return nil
}

// GetParty returns a party, or ErrNoParty.
func (c *Client) GetParty(ctx context.Context, tenant, code string) (Party, error) {
	resp, err := c.cli.Get(ctx, PartyKey(tenant, code))
	if err != nil {
		return Party{}, err
	}
	if len(resp.Kvs) == 0 {
		return Party{}, ErrNoParty
	}
	var p Party
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return Party{}, fmt.Errorf("clusterstate: party %s: %w", code, err)
	}
	return p, nil
}

// PartyMember is a member streaming FindMatch with a party's code.
type PartyMember struct {
	QueuedMember
	Token string `json:"token"` // the member's search token
	// Mod and create revisions of the member's key, when read.
	Rev       int64 `json:"-"`
	CreateRev int64 `json:"-"`
}

// JoinParty puts m in the first free slot of party (of size slots), bound
// to lease, and takes the member's search key with m.Token. It returns the
// slot and the revision of the write (results with a higher mod revision
// are this search's), or ErrAlreadySearching, ErrNoParty or ErrPartyFull.
func (c *Client) JoinParty(ctx context.Context, lease *Lease, p Party, m PartyMember) (int, int64, error) {
	search := SearchKey(p.Tenant, m.AccountID)
	party := PartyKey(p.Tenant, p.Code)
	for slot := 0; slot < p.Size; slot++ {
		m.Slot = slot
		b, err := json.Marshal(m)
		if err != nil {
			return 0, 0, err
		}
		key := PartyMemberKey(p.Tenant, p.Code, slot)
		resp, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(party), ">", 0),
			clientv3.Compare(clientv3.CreateRevision(search), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		).Then(
			clientv3.OpPut(search, m.Token, clientv3.WithLease(clientv3.LeaseID(lease.ID()))),
			clientv3.OpPut(key, string(b), clientv3.WithLease(clientv3.LeaseID(lease.ID()))),
			clientv3.OpDelete(ResultKey(m.Replica, p.Tenant, m.AccountID)),
		).Else(
			clientv3.OpGet(party, clientv3.WithCountOnly()),
			clientv3.OpGet(search, clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return 0, 0, err
		}
		if resp.Succeeded {
			return slot, resp.Header.Revision, nil
		}
		switch {
		case resp.Responses[0].GetResponseRange().Count == 0:
			return 0, 0, ErrNoParty
		case resp.Responses[1].GetResponseRange().Count > 0:
			return 0, 0, ErrAlreadySearching
		}
	}
	return 0, 0, ErrPartyFull
}

// PartyMembers reads a party's members (by slot) now.
func (c *Client) PartyMembers(ctx context.Context, tenant, code string) ([]PartyMember, error) {
	var out []PartyMember
	err := c.WatchParty(ctx, tenant, code, func(ms []PartyMember) bool { out = ms; return false })
	return out, err
}

// WatchParty calls fn with a party's members (by slot) as they are now and
// after every single change (one call per event, in order), until fn returns false, ctx ends (ctx's error) or the
// watch breaks (its error: the caller cannot know who is there any more).
func (c *Client) WatchParty(ctx context.Context, tenant, code string, fn func(members []PartyMember) bool) error {
	prefix := PartyMembersPrefix(tenant, code)
	resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	members := map[string]PartyMember{}
	put := func(kv *mvccpb.KeyValue) {
		var m PartyMember
		if json.Unmarshal(kv.Value, &m) == nil {
			m.Rev, m.CreateRev = kv.ModRevision, kv.CreateRevision
			members[string(kv.Key)] = m
		}
	}
	list := func() []PartyMember {
		out := make([]PartyMember, 0, len(members))
		for _, m := range members {
			out = append(out, m)
		}
		slices.SortFunc(out, func(a, b PartyMember) int { return cmp.Compare(a.Slot, b.Slot) })
		return out
	}
	for _, kv := range resp.Kvs {
		put(kv)
	}
	if !fn(list()) {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events { // one call per change: none is skipped
			if ev.Type == mvccpb.PUT {
				put(ev.Kv)
			} else {
				delete(members, string(ev.Kv.Key))
			}
			if !fn(list()) {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("clusterstate: party watch ended")
}

// QueuePartyTicket puts a full party's ticket in its queue, bound to lease,
// if no ticket has its id yet and every member is still in its slot as read
// (QueuedMember.MemberRev). It reports whether this call queued it (false:
// another member's call did, or a member left).
func (c *Client) QueuePartyTicket(ctx context.Context, lease *Lease, t QueuedTicket) (bool, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	key := TicketKey(t.Tenant, t.Mode, t.ID)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	for _, m := range t.Members {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(PartyMemberKey(t.Tenant, t.Party, m.Slot)), "=", m.MemberRev))
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(key, string(b), clientv3.WithLease(clientv3.LeaseID(lease.ID())))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
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
