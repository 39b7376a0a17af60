package clusterstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

func ticketFor(tenant, id, account string) QueuedTicket {
	return QueuedTicket{ID: id, Tenant: tenant, Mode: "m", Enqueued: time.Now(),
		Members: []QueuedMember{{AccountID: account, Replica: "r1", Rating: 1500, RTT: map[string]float64{"eu": 20}}}}
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
	if err := state.PutMatchRules(ctx, tenant, "m", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	q, err := state.ReadQueue(ctx, tenant, "m")
	if err != nil || len(q.Tickets) != 2 || string(q.Rules) != "{}" {
		t.Fatalf("queue %+v %v", q, err)
	}
	l, err := state.Campaign(ctx, lease, MatchElection(tenant, "m"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	rl, err := state.GrantResultsLease(ctx, 10*time.Second)
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
	s := Settlement{Tickets: q.Tickets, ResultsLease: rl,
		Results: map[string][]byte{"a1": []byte("found-1"), "a2": []byte("found-2")}}
	if _, err := state.Settle(ctx, l, s); !errors.Is(err, ErrTicketsChanged) {
		t.Fatalf("settle with a changed ticket: %v, want ErrTicketsChanged", err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 2 {
		t.Fatalf("%d tickets after a failed settlement, want 2", n)
	}
	if _, ok, _ := state.Result(ctx, "r1", tenant, "a1"); ok {
		t.Fatal("a result written by a failed settlement")
	}
	// Read again: it settles, deletes the tickets and search keys, puts results.
	q, _ = state.ReadQueue(ctx, tenant, "m")
	s.Tickets = q.Tickets
	rev, err := state.Settle(ctx, l, s)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 0 {
		t.Fatalf("%d tickets after settling", n)
	}
	r, ok, err := state.Result(ctx, "r1", tenant, "a1")
	if err != nil || !ok || string(r.Value) != "found-1" || r.Rev != rev {
		t.Fatalf("result %+v %v %v", r, ok, err)
	}
	// Settled twice: the second fails, nothing is matched twice.
	if _, err := state.Settle(ctx, l, s); !errors.Is(err, ErrTicketsChanged) {
		t.Fatalf("second settlement: %v, want ErrTicketsChanged", err)
	}
	// The search keys are gone: a1 may search again, and the stale result
	// is deleted by the new search.
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t3", "a1"), "tok3"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := state.Result(ctx, "r1", tenant, "a1"); ok {
		t.Fatal("stale result kept by a new search")
	}
	// EndSearch with another search's token leaves that search's key.
	if err := state.EndSearch(ctx, tenant, "a1", "tok1", TicketKey(tenant, "m", "t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t4", "a1"), "tok4"); !errors.Is(err, ErrAlreadySearching) {
		t.Fatalf("after a stale EndSearch: %v, want ErrAlreadySearching", err)
	}
	if err := state.EndSearch(ctx, tenant, "a1", "tok3", TicketKey(tenant, "m", "t3")); err != nil {
		t.Fatal(err)
	}
	if n, _ := state.CountTickets(ctx, tenant, "m"); n != 0 {
		t.Fatalf("%d tickets after EndSearch", n)
	}
	if _, err := state.Enqueue(ctx, lease, ticketFor(tenant, "t5", "a1"), "tok5"); err != nil {
		t.Fatalf("after EndSearch: %v", err)
	}
}

// Party slots: no party, a full party, and one ticket per assembly.
func TestTicketPartySlots(t *testing.T) {
	ctx := testCtx(t)
	tenant := fmt.Sprintf("tp%d", time.Now().UnixNano())
	lease := grantLease(t)
	p := Party{Code: "ABC234", Tenant: tenant, Mode: "m", Size: 2, Creator: "a1"}
	member := func(acc string) PartyMember {
		return PartyMember{QueuedMember: QueuedMember{AccountID: acc, Replica: "r1", Rating: 1500}, Token: "tok-" + acc}
	}
	if _, _, err := state.JoinParty(ctx, lease, p, member("a1")); !errors.Is(err, ErrNoParty) {
		t.Fatalf("join before create: %v, want ErrNoParty", err)
	}
	if err := state.CreateParty(ctx, p, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := state.CreateParty(ctx, p, time.Minute); !errors.Is(err, ErrPartyExists) {
		t.Fatalf("code reused: %v", err)
	}
	for i, acc := range []string{"a1", "a2"} {
		if slot, _, err := state.JoinParty(ctx, lease, p, member(acc)); err != nil || slot != i {
			t.Fatalf("%s: slot %d %v", acc, slot, err)
		}
	}
	if _, _, err := state.JoinParty(ctx, lease, p, member("a1")); !errors.Is(err, ErrAlreadySearching) {
		t.Fatalf("a1 twice: %v", err)
	}
	if _, _, err := state.JoinParty(ctx, lease, p, member("a3")); !errors.Is(err, ErrPartyFull) {
		t.Fatalf("a third member: %v, want ErrPartyFull", err)
	}
	var ms []PartyMember
	if err := state.WatchParty(ctx, tenant, p.Code, func(got []PartyMember) bool { ms = got; return false }); err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].AccountID != "a1" || ms[1].Slot != 1 {
		t.Fatalf("members %+v", ms)
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
}
