package clusterstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func ticketFor(tenant, id, account string) QueuedTicket {
	return QueuedTicket{ID: id, Tenant: tenant, Mode: "m", Enqueued: time.Now(),
		Members: []QueuedMember{{AccountID: account, Replica: "r1", Rating: 1500, RTT: map[string]float64{"eu": 20}}}}
}

// readQueue reads a queue as the leader does: the first report of
// WatchQueue, a Reset.
func readQueue(t *testing.T, tenant, mode string) QueueChange {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	first := make(chan QueueChange, 1)
	go state.WatchQueue(ctx, tenant, mode, func(ch QueueChange) {
		if ch.Reset {
			select {
			case first <- ch:
			default:
			}
		}
		cancel()
	})
	select {
	case ch := <-first:
		return ch
	case <-time.After(10 * time.Second):
		t.Fatal("WatchQueue reported nothing")
		return QueueChange{}
	}
}

// One search per account; a settlement is all or nothing, and fails when a
// ticket changed since it was read.
func TestTicketEnqueueAndSettle(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tt%d", time.Now().UnixNano())
	lease := grantLease(t)
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t1", "a1"), "tok1"); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t2", "a1"), "tok2"); !errors.Is(err, ErrAlreadySearching) {
		t.Fatalf("second search of a1: %v, want ErrAlreadySearching", err)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t2", "a2"), "tok2"); err != nil {
		t.Fatal(err)
	}
	q := readQueue(t, tenant, "m")
	if len(q.Put) != 2 || q.Put[0].ID != "t1" || q.Put[0].Members[0].AccountID != "a1" || q.Put[0].Rev == 0 {
		t.Fatalf("queue %+v", q)
	}
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	rl, err := state.GrantExpiringLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// t2 changes behind the reader's back: the settlement of both fails.
	changed := ticketFor(tenant, "t2", "a2")
	changed.Members[0].Rating = 1700
	b, _ := json.Marshal(changed)
	if _, err := raw.Put(ctx, TicketKey(tenant, "m", "t2"), string(b)); err != nil {
		t.Fatal(err)
	}
	s := Settlement{Tickets: q.Put, ResultsLease: rl,
		Results: map[string][]byte{"a1": []byte("found-1"), "a2": []byte("found-2")}}
	if _, err := state.Settle(ctx, l, s); !errors.Is(err, ErrTicketsChanged) {
		t.Fatalf("settle with a changed ticket: %v, want ErrTicketsChanged", err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 2 {
		t.Fatalf("%d tickets after a failed settlement, want 2", n)
	}
	if _, ok, _ := state.Result(ctx, "r1", tenant, "a1", 0); ok {
		t.Fatal("a result written by a failed settlement")
	}
	// Read again: it settles, deletes the tickets and search keys, puts results.
	s.Tickets = readQueue(t, tenant, "m").Put
	rev, err := state.Settle(ctx, l, s)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 0 {
		t.Fatalf("%d tickets after settling", n)
	}
	r, ok, err := state.Result(ctx, "r1", tenant, "a1", 0)
	if err != nil || !ok || string(r.Value) != "found-1" || r.Rev != rev {
		t.Fatalf("result %+v %v %v", r, ok, err)
	}
	// Settled twice: the second fails, nothing is matched twice.
	if _, err := state.Settle(ctx, l, s); !errors.Is(err, ErrTicketsChanged) {
		t.Fatalf("second settlement: %v, want ErrTicketsChanged", err)
	}
	// The search keys are gone: a1 may search again, and the stale result
	// (left to its lease) is older than the new search.
	rev3, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t3", "a1"), "tok3")
	if err != nil {
		t.Fatal(err)
	}
	if stale, ok, _ := state.Result(ctx, "r1", tenant, "a1", 0); ok && stale.Rev >= rev3 {
		t.Fatalf("stale result at %d, the new search at %d", stale.Rev, rev3)
	}
	// EndSearch with another search's token leaves that search's key.
	// (t1 was settled: EndSearch finds it gone.)
	if found, err := state.EndSearch(ctx, tenant, "a1", "tok1", TicketKey(tenant, "m", "t1")); err != nil || found[0] {
		t.Fatalf("EndSearch of a settled ticket: found %v, %v; want it gone", found, err)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t4", "a1"), "tok4"); !errors.Is(err, ErrAlreadySearching) {
		t.Fatalf("after a stale EndSearch: %v, want ErrAlreadySearching", err)
	}
	if found, err := state.EndSearch(ctx, tenant, "a1", "tok3", TicketKey(tenant, "m", "t3"), TicketKey(tenant, "m", "none")); err != nil || !found[0] || found[1] {
		t.Fatalf("EndSearch of a queued ticket and a missing one: found %v, %v; want [true false]", found, err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 0 {
		t.Fatalf("%d tickets after EndSearch", n)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t5", "a1"), "tok5"); err != nil {
		t.Fatalf("after EndSearch: %v", err)
	}
	// A leader that lost its term settles nothing.
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	s.Tickets = readQueue(t, tenant, "m").Put
	if _, err := state.Settle(ctx, l, s); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("settlement after resigning: %v, want ErrNotLeader", err)
	}
}

// Concurrent enqueues are committed in groups, and an account already
// searching fails only its own enqueue.
func TestTicketConcurrentEnqueuesShareTransactions(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tg%d", time.Now().UnixNano())
	lease := grantLease(t)
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "busy-1", "busy"), "tok"); err != nil {
		t.Fatal(err)
	}
	const n = 60
	start := make(chan struct{})
	revs := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		account := fmt.Sprintf("a%d", i)
		if i == n/2 {
			account = "busy"
		}
		wg.Go(func() {
			<-start
			revs[i], errs[i] = state.Enqueue(ctx, lease, ticketFor(tenant, fmt.Sprintf("t%d", i), account), "tok")
		})
	}
	close(start)
	wg.Wait()
	perRev := map[int64]int{}
	for i := range n {
		if i == n/2 {
			if !errors.Is(errs[i], ErrAlreadySearching) {
				t.Fatalf("the busy account's enqueue: %v, want ErrAlreadySearching", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("enqueue %d: %v", i, errs[i])
		}
		perRev[revs[i]]++
	}
	if len(perRev) >= n-1 {
		t.Fatalf("%d enqueues in %d transactions: no group commit", n-1, len(perRev))
	}
	t.Logf("%d enqueues in %d transactions", n-1, len(perRev))
	if c, _ := state.CountTickets(ctx, tenant, "m"); c != n {
		t.Fatalf("%d tickets, want %d", c, n)
	}
}

// A group where one account is already searching: that one alone is
// refused; the group's other writes commit at one revision.
func TestTicketGroupRefusesOnlyTheAccountSearching(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tr%d", time.Now().UnixNano())
	lease := grantLease(t)
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "old", "a2"), "tok"); err != nil {
		t.Fatal(err)
	}
	var group []*txnItem
	for i := range 4 {
		group = append(group, enqueueTxn(lease.ID(), ticketFor(tenant, fmt.Sprintf("t%d", i), fmt.Sprintf("a%d", i)), "tok"))
	}
	state.committer().commitGroup(group)
	var rev int64
	for i, it := range group {
		r, err := it.enqueued()
		switch {
		case it.groupSize != 4:
			t.Fatalf("item %d committed in a group of %d, want 4", i, it.groupSize)
		case i == 2:
			if !errors.Is(err, ErrAlreadySearching) {
				t.Fatalf("a2: %v, want ErrAlreadySearching", err)
			}
		case err != nil:
			t.Fatalf("a%d: %v", i, err)
		case rev != 0 && r != rev:
			t.Fatalf("a%d at revision %d, the others at %d", i, r, rev)
		default:
			rev = r
		}
	}
	if c, _ := state.CountTickets(ctx, tenant, "m"); c != 4 {
		t.Fatalf("%d tickets, want 4 (3 new and a2's old one)", c)
	}
}

// etcd refusing a group reports its error to every caller in it, and
// writes nothing; a fault of one lease fails only that lease's writes.
func TestTicketGroupFailureReachesEveryCaller(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tf%d", time.Now().UnixNano())
	dead := grantLease(t)
	if err := dead.Close(); err != nil { // revoked: etcd refuses puts bound to it
		t.Fatal(err)
	}
	live := grantLease(t)
	items := func(lease func(i int) int64) []*txnItem {
		var group []*txnItem
		for i := range 5 {
			group = append(group, enqueueTxn(lease(i), ticketFor(tenant, uniq("t"), uniq("a")), "tok"))
		}
		return group
	}
	// Every write names the dead lease: the group's error goes to all.
	group := items(func(int) int64 { return dead.ID() })
	state.committer().commitGroup(group)
	for i, it := range group {
		if _, err := it.enqueued(); !errors.Is(err, rpctypes.ErrLeaseNotFound) || it.groupSize != 0 {
			t.Fatalf("item %d: %v (group of %d), want the group's ErrLeaseNotFound", i, err, it.groupSize)
		}
	}
	// Mixed: only the dead lease's writes fail.
	group = items(func(i int) int64 {
		if i%2 == 0 {
			return dead.ID()
		}
		return live.ID()
	})
	state.committer().commitGroup(group)
	for i, it := range group {
		_, err := it.enqueued()
		if i%2 == 0 && !errors.Is(err, rpctypes.ErrLeaseNotFound) || i%2 == 1 && err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	if c, _ := state.CountTickets(ctx, tenant, "m"); c != 2 {
		t.Fatalf("%d tickets, want the 2 of the live lease", c)
	}
	// A client whose connection is gone: every caller gets the error.
	cli, err := clientv3.New(clientv3.Config{Endpoints: raw.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := New(cli)
	g := closed.committer()
	cli.Close()
	group = items(func(int) int64 { return live.ID() })
	g.commitGroup(group)
	for i, it := range group {
		if _, err := it.enqueued(); err == nil {
			t.Fatalf("item %d: committed through a closed client", i)
		}
	}
	if c, _ := state.CountTickets(ctx, tenant, "m"); c != 2 {
		t.Fatalf("%d tickets, want 2", c)
	}
	// And through the public path, concurrently: each caller sees it.
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = state.Enqueue(ctx, dead, ticketFor(tenant, uniq("t"), uniq("a")), "tok")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("caller %d: %v, want ErrLeaseNotFound", i, err)
		}
	}
}

// Settlements committed together keep their own fences and compares: one
// whose ticket changed fails, the other settles.
func TestTicketSettlementsInOneGroup(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("ts%d", time.Now().UnixNano())
	lease := grantLease(t)
	for i := range 4 {
		if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, fmt.Sprintf("t%d", i), fmt.Sprintf("a%d", i)), "tok"); err != nil {
			t.Fatal(err)
		}
	}
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	rl, err := state.GrantExpiringLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q := readQueue(t, tenant, "m").Put
	if _, err := raw.Put(ctx, TicketKey(tenant, "m", "t3"), `{"id":"t3"}`, clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	var group []*txnItem
	for i := range 2 {
		group = append(group, settleTxn(l, Settlement{Tickets: q[2*i : 2*i+2], ResultsLease: rl, Results: map[string][]byte{
			q[2*i].Members[0].AccountID: []byte("r"), q[2*i+1].Members[0].AccountID: []byte("r")}}))
	}
	state.committer().commitGroup(group)
	_, err0 := group[0].settled(l)
	_, err1 := group[1].settled(l)
	if err0 != nil || !errors.Is(err1, ErrTicketsChanged) || group[0].groupSize != 2 {
		t.Fatalf("settlements: %v, %v (group of %d); want nil, ErrTicketsChanged in a group of 2", err0, err1, group[0].groupSize)
	}
	if _, ok, _ := state.Result(ctx, "r1", tenant, "a2", 0); ok {
		t.Fatal("the failed settlement wrote a result")
	}
	if _, ok, _ := state.Result(ctx, "r1", tenant, "a0", 0); !ok {
		t.Fatal("the settlement that succeeded wrote no result")
	}

	left := readQueue(t, tenant, "m").Put
	if len(left) != 2 || left[0].ID != "t2" || left[1].ID != "t3" {
		t.Fatalf("left in the queue: %+v, want t2 and t3", left)
	}
}

// WatchQueue reports the queue, then each change with its revision.
func TestTicketWatchQueue(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tw%d", time.Now().UnixNano())
	lease := grantLease(t)
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t1", "a1"), "tok"); err != nil {
		t.Fatal(err)
	}
	changes := make(chan QueueChange, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go state.WatchQueue(wctx, tenant, "m", func(ch QueueChange) { changes <- ch })
	next := func() QueueChange {
		t.Helper()
		select {
		case ch := <-changes:
			return ch
		case <-time.After(10 * time.Second):
			t.Fatal("no change reported")
			return QueueChange{}
		}
	}
	if ch := next(); !ch.Reset || len(ch.Put) != 1 || ch.Put[0].ID != "t1" || ch.Put[0].Tenant != tenant {
		t.Fatalf("first report %+v, want a reset with t1", ch)
	}
	rev, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t2", "a2"), "tok")
	if err != nil {
		t.Fatal(err)
	}
	if ch := next(); ch.Reset || len(ch.Put) != 1 || ch.Put[0].ID != "t2" || ch.Put[0].Rev != rev || ch.Rev < rev {
		t.Fatalf("after enqueueing t2 at %d: %+v", rev, ch)
	}
	if _, err := state.EndSearch(ctx, tenant, "a1", "tok", TicketKey(tenant, "m", "t1")); err != nil {
		t.Fatal(err)
	}
	if ch := next(); len(ch.Deleted) != 1 || ch.Deleted[0] != "t1" || len(ch.Put) != 0 {
		t.Fatalf("after t1 left: %+v", ch)
	}
}

// Party slots: no party, a full party, one ticket per assembly, and a
// settlement seen by the members all at once.
func TestTicketPartySlots(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tp%d", time.Now().UnixNano())
	lease := grantLease(t)
	pl, err := state.GrantExpiringLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := Party{Code: "ABC234", Tenant: tenant, Mode: "m", Size: 2, Creator: "a1"}
	member := func(acc string) PartyMember {
		return PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1", Rating: 1500}, Token: "tok-" + acc}
	}
	if _, err := state.JoinParty(ctx, lease, p, member("a1")); !errors.Is(err, ErrNoParty) {
		t.Fatalf("join before create: %v, want ErrNoParty", err)
	}
	if err := state.CreateParty(ctx, p, pl); err != nil {
		t.Fatal(err)
	}
	if err := state.CreateParty(ctx, p, pl); !errors.Is(err, ErrPartyExists) {
		t.Fatalf("code reused: %v", err)
	}
	follow, err := state.FollowParty(ctx, tenant, p.Code) // a1's, from before its join
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Stop()
	var joined []Joined
	for i, acc := range []string{"a1", "a2"} {
		j, err := state.JoinParty(ctx, lease, p, member(acc))
		if err != nil || j.Slot != i || len(j.Members) != i+1 || j.Members[i].AccountID != acc || j.Members[i].CreateRev != j.Rev {
			t.Fatalf("%s: %+v %v", acc, j, err)
		}
		joined = append(joined, j)
	}
	if _, err := state.JoinParty(ctx, lease, p, member("a1")); !errors.Is(err, ErrAlreadySearching) {
		t.Fatalf("a1 twice: %v", err)
	}
	if _, err := state.JoinParty(ctx, lease, p, member("a3")); !errors.Is(err, ErrPartyFull) {
		t.Fatalf("a third member: %v, want ErrPartyFull", err)
	}
	// A member asking for another size or mode is refused before it takes
	// a slot, and told what the party is.
	for _, wrong := range []Party{{Code: p.Code, Tenant: tenant, Mode: "m", Size: 3}, {Code: p.Code, Tenant: tenant, Mode: "x", Size: 2}} {
		var mm *PartyMismatch
		if _, err := state.JoinParty(ctx, lease, wrong, member("a4")); !errors.As(err, &mm) || mm.Mode != "m" || mm.Size != 2 {
			t.Fatalf("joining %+v: %v, want a PartyMismatch naming mode m and size 2", wrong, err)
		}
	}
	ms, rev, err := state.PartyMembers(ctx, tenant, p.Code)
	if err != nil || len(ms) != 2 || ms[0].AccountID != "a1" || ms[1].Slot != 1 || rev < joined[1].Rev {
		t.Fatalf("members %+v at %d: %v", ms, rev, err)
	}
	// a1 follows the party from its join: it sees a2 come. It also sees
	// a3, refused, come and go again: the party is its first two members
	// (Roster), and only changes of those are reported here.
	seen := make(chan []PartyMember, 8)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	last := ""
	go follow.Watch(wctx, joined[0].Rev, joined[0].Members, func(ms []PartyMember) bool {
		ms = Roster(ms, p.Size)
		names := ""
		for _, m := range ms {
			names += m.AccountID + ","
		}
		if names != last {
			last = names
			seen <- ms
		}
		return true
	})
	next := func() []PartyMember {
		t.Helper()
		select {
		case ms := <-seen:
			return ms
		case <-time.After(10 * time.Second):
			t.Fatal("no party change reported")
			return nil
		}
	}
	if got := next(); len(got) != 2 || got[1].AccountID != "a2" {
		t.Fatalf("a1 saw %+v, want a1 and a2", got)
	}
	tk := QueuedTicket{ID: PartyTicketID(p.Code, ms), Tenant: tenant, Mode: "m", Party: p.Code, Enqueued: time.Now()}
	for _, m := range ms {
		qm := m.QueuedMember
		qm.Slot, qm.MemberRev = m.Slot, m.Rev
		tk.Members = append(tk.Members, qm)
	}
	for i, want := range []bool{true, false} {
		if ok, err := state.QueuePartyTicket(ctx, lease, tk); err != nil || ok != want {
			t.Fatalf("queue attempt %d: %v %v, want %v", i, ok, err, want)
		}
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
	// The settlement deletes both members' keys at once: one report.
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	q := readQueue(t, tenant, "m").Put
	if _, err := state.Settle(ctx, l, Settlement{Tickets: q, ResultsLease: pl,
		Results: map[string][]byte{"a1": []byte("r1"), "a2": []byte("r2")}}); err != nil {
		t.Fatal(err)
	}
	if got := next(); len(got) != 0 {
		t.Fatalf("after the settlement a1 saw %+v, want nobody", got)
	}
}

// A party stored by an earlier version (its whole JSON) is joined all the
// same.
func TestTicketPartyOfAnEarlierEncoding(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("te%d", time.Now().UnixNano())
	lease := grantLease(t)
	old := `{"code":"OLD234","tenant":"` + tenant + `","mode":"m","size":2,"creator":"a0","expires":"2030-01-01T00:00:00Z"}`
	if _, err := raw.Put(ctx, PartyKey(tenant, "OLD234"), old); err != nil {
		t.Fatal(err)
	}
	p := Party{Code: "OLD234", Tenant: tenant, Mode: "m", Size: 2}
	j, err := state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: "a1", Replica: "r1"}, Token: "a1"})
	if err != nil || j.Slot != 0 {
		t.Fatalf("join: %+v %v", j, err)
	}
	p.Size = 4
	if _, err := state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: "a2", Replica: "r1"}, Token: "a2"}); !errors.Is(err, ErrPartyMismatch) {
		t.Fatalf("join with another size: %v, want ErrPartyMismatch", err)
	}
}

// A large party fills in join order, and refuses one more.
func TestTicketLargePartyFillsInOrder(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tl%d", time.Now().UnixNano())
	lease := grantLease(t)
	p := Party{Code: "LARGE2", Tenant: tenant, Mode: "m", Size: 17, Creator: "a0"}
	createParty(t, ctx, p)
	for i := range p.Size {
		acc := fmt.Sprintf("a%d", i)
		j, err := state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1"}, Token: acc})
		if err != nil || j.Slot != i || len(j.Members) != i+1 {
			t.Fatalf("%s: slot %d, %d members, %v; want slot %d", acc, j.Slot, len(j.Members), err, i)
		}
	}
	if _, err := state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: "late", Replica: "r1"}, Token: "late"}); !errors.Is(err, ErrPartyFull) {
		t.Fatalf("one more: %v, want ErrPartyFull", err)
	}
}

// When the oldest waiting write has waited longer than maxAdmissionWait, a
// write that starts a search is refused at once (ErrBusy); one that ends a
// search still waits its turn, and both waiting writes then commit.
func TestTicketBusyRefusesNewSearches(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tb%d", time.Now().UnixNano())
	lease := grantLease(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: raw.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := New(cli) // its own committer
	defer c.Close()
	g := c.committer()
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			got := len(g.pending)
			g.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d writes waiting, want %d", got, n)
			}
		}
	}
	g.mu.Lock()
	g.inFlight = maxGroupsInFlight // as if etcd were slow: nothing is sent
	g.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := c.Enqueue(ctx, lease, ticketFor(tenant, "t1", "a1"), "tok")
		first <- err
	}()
	waiting(1)
	g.mu.Lock()
	g.pending[0].queuedAt = time.Now().Add(-2 * maxAdmissionWait)
	g.mu.Unlock()
	if _, err := c.Enqueue(ctx, lease, ticketFor(tenant, "t2", "a2"), "tok"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a new search behind a long wait: %v, want ErrBusy", err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := c.EndSearch(ctx, tenant, "a3", "tok", TicketKey(tenant, "m", "t3"))
		ended <- err
	}()
	waiting(2)
	g.mu.Lock()
	g.inFlight = 0
	g.startLocked()
	g.mu.Unlock()
	if err := <-first; err != nil {
		t.Fatalf("the waiting search: %v", err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("the waiting end of a search: %v", err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
}

// A party a member left: the next join takes the free place (last in join
// order), and the party is full again.
func TestTicketPartyJoinFillsAHole(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("th%d", time.Now().UnixNano())
	lease := grantLease(t)
	p := Party{Code: "HOLE23", Tenant: tenant, Mode: "m", Size: 3, Creator: "a0"}
	createParty(t, ctx, p)
	join := func(acc string) (Joined, error) {
		return state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1", Rating: 1400,
			RTT: map[string]float64{"eu": 30, "us": 90}}, Token: "tok-" + acc})
	}
	for i, acc := range []string{"a0", "a1", "a2"} {
		if j, err := join(acc); err != nil || j.Slot != i {
			t.Fatalf("%s: %+v %v", acc, j, err)
		}
	}
	if _, err := state.EndSearch(ctx, tenant, "a1", "tok-a1", PartyMemberKey(tenant, p.Code, "a1")); err != nil {
		t.Fatal(err)
	}
	j, err := join("a3")
	if err != nil || j.Slot != 2 || len(j.Members) != 3 {
		t.Fatalf("a3 into the hole: %+v %v, want place 2 of 3 members", j, err)
	}
	for i, m := range j.Members {
		if m.Slot != i || (i == 2 && (m.AccountID != "a3" || m.Token != "tok-a3" || m.RTT["us"] != 90 || m.Rating != 1400)) {
			t.Fatalf("place %d holds %+v", i, m)
		}
	}
	if _, err := join("a4"); !errors.Is(err, ErrPartyFull) {
		t.Fatalf("a4: %v, want ErrPartyFull", err)
	}
	// The refused join took its keys back: no search key, no member key.
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "solo-a4", "a4"), "tok"); err != nil {
		t.Fatalf("a4 searching alone after a refused join: %v", err)
	}
	if ms, _, err := state.PartyMembers(ctx, tenant, p.Code); err != nil || len(ms) != 3 || ms[2].AccountID != "a3" {
		t.Fatalf("members after the refused join: %+v %v", ms, err)
	}
}

// Many joining one party at once: nothing in a join's transaction stops
// more than Size members being written, so exactly Size are in (the first
// in join order), every other one is refused and takes its keys back, and
// every joiner in reads the same members. Four parties, each joined by
// twelve at once through one client, so that joins meet in group commits.
func TestTicketPartyOversubscribed(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprint(round), testPartyOversubscribed)
	}
}

func testPartyOversubscribed(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("to%d", time.Now().UnixNano())
	lease := grantLease(t)
	p := Party{Code: "MANY23", Tenant: tenant, Mode: "m", Size: 3, Creator: "a0"}
	createParty(t, ctx, p)
	const joiners = 12
	type outcome struct {
		acc string
		j   Joined
		err error
	}
	out := make(chan outcome, joiners)
	for i := range joiners {
		acc := fmt.Sprintf("a%02d", i)
		go func() {
			j, err := state.JoinParty(ctx, lease, p, PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1"}, Token: "tok-" + acc})
			out <- outcome{acc, j, err}
		}()
	}
	var in []outcome
	var refused []string
	for range joiners {
		o := <-out
		switch {
		case o.err == nil:
			in = append(in, o)
		case errors.Is(o.err, ErrPartyFull):
			refused = append(refused, o.acc)
		default:
			t.Fatalf("%s: %v", o.acc, o.err)
		}
	}
	if len(in) != p.Size || len(refused) != joiners-p.Size {
		t.Fatalf("%d joined and %d refused, want %d and %d", len(in), len(refused), p.Size, joiners-p.Size)
	}
	ms, _, err := state.PartyMembers(ctx, tenant, p.Code)
	if err != nil || len(ms) != p.Size {
		t.Fatalf("members %+v %v, want the %d who joined", ms, err, p.Size)
	}
	for _, o := range in {
		// Each joiner's view as of its join holds itself, at its place,
		// and agrees with the final members on everyone up to it.
		if o.j.Slot >= len(o.j.Members) || o.j.Members[o.j.Slot].AccountID != o.acc || ms[o.j.Slot].AccountID != o.acc {
			t.Fatalf("%s joined at place %d with %+v; members now %+v", o.acc, o.j.Slot, o.j.Members, ms)
		}
	}
	for _, acc := range refused {
		if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "solo-"+acc, acc), "tok"); err != nil {
			t.Fatalf("%s searching alone after it was refused: %v", acc, err)
		}
	}
}

// A party ticket queued by the version before (members keyed by slot, a
// version 1 value) is still settled, against those keys.
func TestTicketSlotKeyedPartySettles(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tk%d", time.Now().UnixNano())
	lease := grantLease(t)
	leaseOpt := clientv3.WithLease(clientv3.LeaseID(lease.ID()))
	tk := QueuedTicket{ID: "OLD345-1", Tenant: tenant, Mode: "m", Party: "OLD345", Enqueued: time.Now()}
	for slot, acc := range []string{"a1", "a2"} {
		mk := legacyPartySlotKey(tenant, "OLD345", slot)
		resp, err := raw.Put(ctx, mk, encodePartyMember(PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1"}, Token: acc}), leaseOpt)
		if err != nil {
			t.Fatal(err)
		}
		tk.Members = append(tk.Members, QueuedMember{AccountID: acc, Replica: "r1", RTT: map[string]float64{}, Slot: slot, MemberRev: resp.Header.Revision})
	}
	v := []byte(encodeTicket(tk))
	v[0] = valueVersion // the same fields, as the version before wrote them
	if _, err := raw.Put(ctx, TicketKey(tenant, "m", tk.ID), string(v), leaseOpt); err != nil {
		t.Fatal(err)
	}
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	q := readQueue(t, tenant, "m").Put
	if len(q) != 1 || !q[0].slotKeyed {
		t.Fatalf("queue %+v, want the one slot-keyed ticket", q)
	}
	rl, err := state.GrantExpiringLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := state.Settle(ctx, l, Settlement{Tickets: q, ResultsLease: rl}); err != nil {
		t.Fatalf("settling the slot-keyed ticket: %v", err)
	}
	resp, err := raw.Get(ctx, mmPrefix()+"party-members/"+tenant+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%v slot keys left after the settlement (%v), want 0", resp.Count, err)
	}
}

// The leader publishes the queue's size; a leader that lost its term cannot.
func TestTicketQueueSize(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tz%d", time.Now().UnixNano())
	lease := grantLease(t)
	if _, ok, err := state.QueueSize(ctx, tenant, "m"); ok || err != nil {
		t.Fatalf("size before any leader: %v %v", ok, err)
	}
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := state.PutQueueSize(ctx, l, lease, tenant, "m", 42); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := state.QueueSize(ctx, tenant, "m"); n != 42 || !ok || err != nil {
		t.Fatalf("size %d %v %v, want 42", n, ok, err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := state.PutQueueSize(ctx, l, lease, tenant, "m", 7); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a former leader's size: %v, want ErrNotLeader", err)
	}
	if n, _, _ := state.QueueSize(ctx, tenant, "m"); n != 42 {
		t.Fatalf("size %d after a former leader's write, want 42", n)
	}
}

// Values round-trip through the binary encoding, and values written as JSON
// (by earlier versions) still decode.
func TestTicketValues(t *testing.T) {
	tk := QueuedTicket{ID: "p-1", Tenant: "acme", Mode: "ranked", Party: "ABC234", Enqueued: time.Unix(1700000000, 123456789),
		Members: []QueuedMember{
			{AccountID: "a1", Replica: "r1", Rating: 1523.25, RTT: map[string]float64{"eu": 20.5, "us": 95}, Slot: 0, MemberRev: 17},
			{AccountID: "a2", Replica: "r2", Rating: 0, RTT: map[string]float64{}, Slot: 1, MemberRev: 1 << 40},
		}}
	same := func(a, b QueuedTicket) bool {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		return string(ja) == string(jb) && a.Enqueued.Equal(b.Enqueued)
	}
	enc := encodeTicket(tk)
	got, ok := decodeTicket([]byte(enc))
	if !ok || !same(got, tk) {
		t.Fatalf("ticket round trip: %+v %v, want %+v", got, ok, tk)
	}
	for n := range len(enc) {
		if _, ok := decodeTicket([]byte(enc[:n])); ok {
			t.Fatalf("a ticket cut to %d of %d bytes decodes", n, len(enc))
		}
	}
	if _, ok := decodeTicket([]byte(enc + "x")); ok {
		t.Fatal("a ticket with a byte after it decodes")
	}
	old, _ := json.Marshal(tk)
	if got, ok := decodeTicket(old); !ok || !same(got, tk) {
		t.Fatalf("ticket from JSON: %+v %v", got, ok)
	}
	// Members as small as they come: the decoder's bound on counts must
	// not refuse them.
	tiny := QueuedTicket{Enqueued: time.Unix(0, 0), Members: make([]QueuedMember, 5)}
	for i := range tiny.Members {
		tiny.Members[i].RTT = map[string]float64{}
	}
	if got, ok := decodeTicket([]byte(encodeTicket(tiny))); !ok || !same(got, tiny) {
		t.Fatalf("ticket of empty members: %+v %v", got, ok)
	}

	pm := PartyMember{QueuedMember: tk.Members[0], Token: "tok"}
	pm.Slot, pm.MemberRev = 0, 0 // a member's value leaves them to its key
	if got, ok := decodePartyMemberValue([]byte(encodePartyMember(pm))); !ok || got.Token != "tok" || got.AccountID != "a1" ||
		got.Replica != "r1" || got.Rating != 1523.25 || len(got.RTT) != 2 || got.RTT["eu"] != 20.5 {
		t.Fatalf("party member round trip: %+v %v", got, ok)
	}
	oldMember, _ := json.Marshal(pm)
	if got, ok := decodePartyMemberValue(oldMember); !ok || got.Token != "tok" || got.RTT["us"] != 95 {
		t.Fatalf("party member from JSON: %+v %v", got, ok)
	}

	results := map[string][]byte{"a1": []byte(`{"ticket":"p-1"}`), "a2": {}}
	if got, ok := decodeResults([]byte(encodeResults(results))); !ok || len(got) != 2 || string(got["a1"]) != `{"ticket":"p-1"}` {
		t.Fatalf("results round trip: %q %v", got, ok)
	}
	oldResults, _ := json.Marshal(results)
	if got, ok := decodeResults(oldResults); !ok || string(got["a1"]) != `{"ticket":"p-1"}` {
		t.Fatalf("results from JSON: %q %v", got, ok)
	}
	for _, bad := range []string{"", "\x02", "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"} {
		if _, ok := decodeTicket([]byte(bad)); ok {
			t.Fatalf("ticket %q decodes", bad)
		}
		if _, ok := decodeResults([]byte(bad)); ok {
			t.Fatalf("results %q decode", bad)
		}
	}
}

// The decoders of stored values take any bytes without panicking, and what
// they accept encodes back to a value that decodes the same.
func FuzzTicketValues(f *testing.F) {
	f.Add([]byte(encodeTicket(ticketFor("t", "id", "a"))))
	f.Add([]byte(encodePartyMember(PartyMember{QueuedMember: ticketFor("t", "id", "a").Members[0], Token: "x"})))
	f.Add([]byte(encodeResults(map[string][]byte{"a": []byte("r")})))
	f.Add([]byte(`{"id":"x","members":[{"account":"a","rtt":{"eu":1}}]}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		if tk, ok := decodeTicket(v); ok && (v[0] == ticketVersion || v[0] == valueVersion) {
			again, ok := decodeTicket([]byte(encodeTicket(tk)))
			if !ok || again.ID != tk.ID || len(again.Members) != len(tk.Members) || !again.Enqueued.Equal(tk.Enqueued) {
				t.Fatalf("ticket %+v re-encoded decodes as %+v %v", tk, again, ok)
			}
		}
		if m, ok := decodePartyMemberValue(v); ok && v[0] == valueVersion {
			if again, ok := decodePartyMemberValue([]byte(encodePartyMember(m))); !ok || again.Token != m.Token || again.AccountID != m.AccountID {
				t.Fatalf("member %+v re-encoded decodes as %+v %v", m, again, ok)
			}
		}
		if rs, ok := decodeResults(v); ok && v[0] == valueVersion {
			if again, ok := decodeResults([]byte(encodeResults(rs))); !ok || len(again) != len(rs) {
				t.Fatalf("results %q re-encoded decode as %q %v", rs, again, ok)
			}
		}
	})
}

// createParty creates p under a party lease of its own (a minute).
func createParty(t *testing.T, ctx context.Context, p Party) {
	t.Helper()
	pl, err := state.GrantExpiringLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := state.CreateParty(ctx, p, pl); err != nil {
		t.Fatal(err)
	}
}

// A party's value, compared by every join, is what json.Marshal writes, for
// modes of every kind.
func TestPartyValueIsJSON(t *testing.T) {
	for _, mode := range []string{"ranked", "4v4_Duo-X9", "", "a\"b", "<html>", "é", "a/b"} {
		p := Party{Mode: mode, Size: 3}
		want, _ := json.Marshal(partyValue{Mode: mode, Size: 3})
		if got := p.value(); got != string(want) {
			t.Errorf("mode %q: %s, want %s", mode, got, want)
		}
	}
}

// A creator holds one open party: a new one replaces the one before (its
// key goes; a member already in keeps its place, a new member is refused),
// however often and however concurrently the account creates parties.
func TestTicketCreatorHoldsOneParty(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tc%d", time.Now().UnixNano())
	lease := grantLease(t)
	pl, err := state.GrantExpiringLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	party := func(code string) Party {
		return Party{Code: code, Tenant: tenant, Mode: "m", Size: 3, Creator: "lead"}
	}
	member := func(acc string) PartyMember {
		return PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1", Rating: 1500}, Token: "tok-" + acc}
	}
	parties := func() []string {
		t.Helper()
		resp, err := raw.Get(ctx, mmPrefix()+"parties/"+tenant+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var codes []string
		for _, kv := range resp.Kvs {
			codes = append(codes, lastSegment(string(kv.Key)))
		}
		return codes
	}

	first := party("FIRST2")
	if err := state.CreateParty(ctx, first, pl); err != nil {
		t.Fatal(err)
	}
	if _, err := state.JoinParty(ctx, lease, first, member("early")); err != nil {
		t.Fatalf("join the first party: %v", err)
	}
	second := party("SECND2")
	if err := state.CreateParty(ctx, second, pl); err != nil {
		t.Fatalf("a second party of the same creator: %v", err)
	}
	if got := parties(); !slices.Equal(got, []string{"SECND2"}) {
		t.Fatalf("party keys after the second party: %v, want only SECND2", got)
	}
	if _, err := state.JoinParty(ctx, lease, first, member("late")); !errors.Is(err, ErrNoParty) {
		t.Fatalf("join the replaced party: %v, want ErrNoParty", err)
	}
	if _, err := state.JoinParty(ctx, lease, second, member("late")); err != nil {
		t.Fatalf("join the second party: %v", err)
	}
	// The code is still one code: another creator cannot take it.
	taken := second
	taken.Creator = "other"
	if err := state.CreateParty(ctx, taken, pl); !errors.Is(err, ErrPartyExists) {
		t.Fatalf("another creator reusing a live code: %v, want ErrPartyExists", err)
	}

	// Many at once, from several goroutines: one party is left.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if err := state.CreateParty(ctx, party(fmt.Sprintf("R%dX%d", g, i)), pl); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent CreateParty: %v", err)
	}
	got := parties()
	if len(got) != 1 {
		t.Fatalf("party keys after 40 concurrent creations: %v, want one", got)
	}
	resp, err := raw.Get(ctx, PartyCreatorKey(tenant, "lead"))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != got[0] {
		t.Fatalf("creator key %v (%v), want %s", resp, err, got[0])
	}
	// A party with no creator named is not counted against anybody.
	if err := state.CreateParty(ctx, Party{Code: "NOBODY", Tenant: tenant, Mode: "m", Size: 2}, pl); err != nil {
		t.Fatal(err)
	}
	if n := len(parties()); n != 2 {
		t.Fatalf("%d party keys, want 2", n)
	}
}
