package matchmaking

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func rules4v4() Rules { return DefaultRules("acme", "duel", twoRegions) }

// party makes a ticket enqueued at t0-waited, one member per rating, all
// with the given RTTs; account ids are id/0, id/1, ...
func party(id string, waited time.Duration, rtt map[string]float64, ratings ...float64) Ticket {
	t := Ticket{ID: id, Tenant: "acme", Mode: "duel", EnqueuedAt: t0.Add(-waited)}
	for i, r := range ratings {
		t.Party = append(t.Party, Member{AccountID: id + "/" + strconv.Itoa(i), Rating: r, RTT: rtt})
	}
	return t
}

var eu = map[string]float64{"eu": 30, "us": 140}
var us = map[string]float64{"eu": 150, "us": 40}
var both = map[string]float64{"eu": 60, "us": 50}

func mustForm(t *testing.T, tickets []Ticket, r Rules) Result {
	t.Helper()
	res, err := Form(t0, tickets, r)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, t0, tickets, r, res)
	return res
}

func TestTicketValidate(t *testing.T) {
	r := rules4v4()
	ok := party("ok", 0, eu, 1500)
	if err := ok.Validate(r); err != nil {
		t.Fatalf("valid ticket: %v", err)
	}
	mod := func(f func(*Ticket)) Ticket {
		c := party("x", 0, eu, 1500, 1600)
		f(&c)
		return c
	}
	cases := []struct {
		name string
		t    Ticket
		want error
	}{
		{"no id", mod(func(t *Ticket) { t.ID = "" }), ErrBadTicket},
		{"long id", mod(func(t *Ticket) { t.ID = strings.Repeat("x", MaxIDLen+1) }), ErrBadTicket},
		{"no time", mod(func(t *Ticket) { t.EnqueuedAt = time.Time{} }), ErrBadTicket},
		{"other tenant", mod(func(t *Ticket) { t.Tenant = "evil" }), ErrWrongQueue},
		{"other mode", mod(func(t *Ticket) { t.Mode = "ffa" }), ErrWrongQueue},
		{"empty party", mod(func(t *Ticket) { t.Party = nil }), ErrEmptyParty},
		{"party larger than a team", party("big", 0, eu, 1, 2, 3, 4, 5), ErrPartyTooLarge},
		{"duplicate member", mod(func(t *Ticket) { t.Party[1].AccountID = t.Party[0].AccountID }), ErrDuplicateMember},
		{"no account id", mod(func(t *Ticket) { t.Party[1].AccountID = "" }), ErrBadTicket},
		{"NaN rating", mod(func(t *Ticket) { t.Party[0].Rating = math.NaN() }), ErrBadRating},
		{"negative rating", mod(func(t *Ticket) { t.Party[0].Rating = -1 }), ErrBadRating},
		{"absurd rating", mod(func(t *Ticket) { t.Party[1].Rating = 10001 }), ErrBadRating},
		{"infinite rating", mod(func(t *Ticket) { t.Party[1].Rating = math.Inf(1) }), ErrBadRating},
		{"negative RTT", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"eu": -5} }), ErrBadRTT},
		{"NaN RTT", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"eu": math.NaN()} }), ErrBadRTT},
		{"RTT over 10 s", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"eu": 10001} }), ErrBadRTT},
		{"RTT in an unknown region is still checked", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"eu": 20, "mars": -1} }), ErrBadRTT},
		{"too far everywhere", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"eu": 81, "us": 101} }), ErrNoRegion},
		{"members share no region", mod(func(t *Ticket) { t.Party[1].RTT = map[string]float64{"us": 20} }), ErrNoRegion},
		{"no measurements", mod(func(t *Ticket) { t.Party[1].RTT = nil }), ErrNoRegion},
	}
	for _, c := range cases {
		err := c.t.Validate(r)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Validate = %v, want %v", c.name, err, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "matchmaking: ") {
			t.Errorf("%s: %q lacks the prefix", c.name, err)
		}
		// Form rejects it the same way, and matches nothing with it.
		res := mustForm(t, []Ticket{c.t}, r)
		if len(res.Rejected) != 1 || !errors.Is(res.Rejected[0].Err, c.want) || res.Rejected[0].Index != 0 {
			t.Errorf("%s: Form rejected %+v", c.name, res.Rejected)
		}
	}
	bad := r
	bad.Teams = 0
	if err := ok.Validate(bad); !errors.Is(err, ErrInvalidRules) {
		t.Errorf("Validate with bad rules: %v", err)
	}
}

func TestEightSolosMakeOneBalancedMatch(t *testing.T) {
	var ts []Ticket
	for i := range 8 {
		ts = append(ts, party("s"+strconv.Itoa(i), time.Duration(i)*time.Second, eu, 1000+float64(i)*10))
	}
	res := mustForm(t, ts, rules4v4())
	if len(res.Matches) != 1 || len(res.Searching) != 0 {
		t.Fatalf("matches %d, searching %d", len(res.Matches), len(res.Searching))
	}
	m := res.Matches[0]
	// 1000..1070 split into two teams of equal sums (4140 each).
	if m.Imbalance != 0 || m.Teams[0].RatingSum != 4140 {
		t.Errorf("imbalance %v, sums %v %v", m.Imbalance, m.Teams[0].RatingSum, m.Teams[1].RatingSum)
	}
	if m.Region != "eu" || m.MaxRTT != 30 || m.Spread != 70 || m.OldestWait != 7*time.Second {
		t.Errorf("match %+v", m)
	}
	if m.Tickets[0] != "s7" {
		t.Errorf("tickets not oldest first: %v", m.Tickets)
	}
}

func TestBandWidensWithWait(t *testing.T) {
	mk := func(waited time.Duration) []Ticket {
		var ts []Ticket
		for i := range 4 {
			ts = append(ts, party("lo"+strconv.Itoa(i), waited, eu, 1000))
			ts = append(ts, party("hi"+strconv.Itoa(i), waited, eu, 1400))
		}
		return ts
	}
	// 400 apart: the band must reach 400, after 30 s.
	if res := mustForm(t, mk(29*time.Second), rules4v4()); len(res.Matches) != 0 {
		t.Fatalf("matched at 29 s (band %v)", res.Searching[0].Band)
	}
	res := mustForm(t, mk(30*time.Second), rules4v4())
	if len(res.Matches) != 1 || res.Matches[0].Spread != 400 {
		t.Fatalf("at 30 s: %+v", res)
	}
	// Balanced: each team has two of each.
	for _, team := range res.Matches[0].Teams {
		if team.RatingSum != 4800 {
			t.Errorf("team sum %v, want 4800", team.RatingSum)
		}
	}
}

func TestBandsMustBeMutual(t *testing.T) {
	// An old ticket with a wide band, and seven new ones 300 away: the new
	// ones accept only ±100, so no match.
	ts := []Ticket{party("old", 40*time.Second, eu, 1800)}
	for i := range 7 {
		ts = append(ts, party("new"+strconv.Itoa(i), 0, eu, 1500))
	}
	res := mustForm(t, ts, rules4v4())
	if len(res.Matches) != 0 || len(res.Searching) != 8 {
		t.Fatalf("%+v", res)
	}
	if res.Searching[0].TicketID != "old" || res.Searching[0].Band != 500 {
		t.Errorf("searching %+v", res.Searching[0])
	}
}

func TestPartiesStayTogetherAndMustFit(t *testing.T) {
	r := rules4v4()
	// Parties of 3, 3 and 2 are 8 players but cannot make two teams of 4.
	ts := []Ticket{
		party("p3a", 3*time.Second, eu, 1500, 1510, 1490),
		party("p3b", 2*time.Second, eu, 1500, 1520, 1480),
		party("p2", 1*time.Second, eu, 1500, 1500),
	}
	if res := mustForm(t, ts, r); len(res.Matches) != 0 {
		t.Fatalf("formed an impossible match: %+v", res.Matches)
	}
	// Two solos make 3+1 and 3+1; the duo keeps waiting.
	ts = append(ts, party("s1", 0, eu, 1500), party("s2", 0, eu, 1500))
	res := mustForm(t, ts, r)
	if len(res.Matches) != 1 || len(res.Searching) != 1 || res.Searching[0].TicketID != "p2" {
		t.Fatalf("%+v", res)
	}
	// Parties of 4 and 4 are the two teams.
	res = mustForm(t, []Ticket{party("a", 0, eu, 1500, 1500, 1500, 1500), party("b", 0, eu, 1550, 1450, 1500, 1500)}, r)
	if len(res.Matches) != 1 {
		t.Fatalf("%+v", res)
	}
	// A duo, a trio and solos where first-fit placement fails: 2,2 then 3
	// needs repacking (2+2 | 3+1).
	r3 := rules4v4()
	res = mustForm(t, []Ticket{
		party("d1", 5*time.Second, eu, 1500, 1500),
		party("d2", 4*time.Second, eu, 1500, 1500),
		party("t1", 3*time.Second, eu, 1500, 1500, 1500),
		party("s", 2*time.Second, eu, 1500),
	}, r3)
	if len(res.Matches) != 1 {
		t.Fatalf("repacking failed: %+v", res)
	}
}

func TestRegions(t *testing.T) {
	r := rules4v4()
	var ts []Ticket
	for i := range 4 {
		ts = append(ts, party("eu"+strconv.Itoa(i), 0, eu, 1500))
		ts = append(ts, party("us"+strconv.Itoa(i), 0, us, 1500))
	}
	// Four in each region: nobody plays across the Atlantic.
	if res := mustForm(t, ts, r); len(res.Matches) != 0 {
		t.Fatalf("matched across regions: %+v", res.Matches)
	}
	// Four who can play in both fill the EU match, in the better region.
	for i := range 4 {
		ts = append(ts, party("both"+strconv.Itoa(i), time.Second, both, 1500))
	}
	res := mustForm(t, ts, r)
	if len(res.Matches) != 1 {
		t.Fatalf("%+v", res)
	}
	// The oldest are the "both" tickets; they take the 4 oldest of the rest
	// (ties by id: eu0..eu3), so the match is in the EU with worst RTT 60.
	if m := res.Matches[0]; m.Region != "eu" || m.MaxRTT != 60 {
		t.Errorf("region %s max RTT %v", m.Region, m.MaxRTT)
	}
	// Alone, the "both" tickets with 4 more "both" ones play in the US (50 < 60).
	var bs []Ticket
	for i := range 8 {
		bs = append(bs, party("b"+strconv.Itoa(i), 0, both, 1500))
	}
	if m := mustForm(t, bs, r).Matches; len(m) != 1 || m[0].Region != "us" || m[0].MaxRTT != 50 {
		t.Fatalf("%+v", m)
	}
	// The worst member decides: a party with one far member is not in the US.
	p := party("p", time.Second, us, 1500, 1500)
	p.Party[1].RTT = map[string]float64{"eu": 20, "us": 101}
	if err := p.Validate(r); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("party with a far member: %v", err)
	}
}

func TestOldestFirst(t *testing.T) {
	// Twelve solos in band: the eight oldest are matched, the four newest
	// wait, even though the newest are nearer in rating.
	var ts []Ticket
	for i := range 12 {
		rating := 1500.0 + float64(i%4)*20
		if i < 4 {
			rating = 1500 // newest, nearest the anchor at 1500
		}
		ts = append(ts, party(strconv.Itoa(100+i), time.Duration(i)*time.Second, eu, rating))
	}
	res := mustForm(t, ts, rules4v4())
	if len(res.Matches) != 1 {
		t.Fatalf("%+v", res)
	}
	var waiting []string
	for _, s := range res.Searching {
		waiting = append(waiting, s.TicketID)
	}
	if want := []string{"103", "102", "101", "100"}; !slices.Equal(waiting, want) {
		t.Errorf("still searching %v, want the newest %v", waiting, want)
	}
}

func TestTimeoutAndBots(t *testing.T) {
	r := rules4v4()
	lonely := party("lonely", 45*time.Second, eu, 2900)
	fresh := party("fresh", 44*time.Second, eu, 2000)
	res := mustForm(t, []Ticket{lonely, fresh}, r)
	if !slices.Equal(res.TimedOut, []string{"lonely"}) || len(res.Searching) != 1 {
		t.Fatalf("%+v", res)
	}

	r.BotsFillAtTimeout = true
	duo := party("duo", 50*time.Second, eu, 2850, 2950)
	res = mustForm(t, []Ticket{lonely, fresh, duo}, r)
	if len(res.TimedOut) != 0 || len(res.Matches) != 1 {
		t.Fatalf("%+v", res)
	}
	m := res.Matches[0]
	if m.BotSeats != 5 || !slices.Equal(m.Tickets, []string{"duo", "lonely"}) {
		t.Errorf("bot match %+v", m)
	}
	for _, team := range m.Teams {
		for _, s := range team.Seats {
			if s.Bot && s.Rating != 2900 {
				t.Errorf("bot rating %v, want the players' average 2900", s.Rating)
			}
		}
	}
	if m.Imbalance != 0 {
		t.Errorf("imbalance %v", m.Imbalance)
	}

	// An expired ticket that can make a full match gets it rather than bots.
	var ts []Ticket
	for i := range 8 {
		ts = append(ts, party("x"+strconv.Itoa(i), time.Minute, eu, 1500))
	}
	res = mustForm(t, ts, r)
	if len(res.Matches) != 1 || res.Matches[0].BotSeats != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestQueueLevelRejections(t *testing.T) {
	r := rules4v4()
	a := party("a", 2*time.Second, eu, 1500)
	dupID := party("a", time.Second, eu, 1600)
	dupID.Party[0].AccountID = "other"
	twice := party("b", time.Second, eu, 1500)
	twice.Party[0].AccountID = a.Party[0].AccountID
	future := party("future", -time.Hour, eu, 1500)
	res := mustForm(t, []Ticket{twice, a, dupID, future}, r)
	if len(res.Rejected) != 2 {
		t.Fatalf("rejected %+v", res.Rejected)
	}
	if res.Rejected[0].Index != 0 || !errors.Is(res.Rejected[0].Err, ErrAlreadyQueued) {
		t.Errorf("younger ticket with a queued account: %+v", res.Rejected[0])
	}
	var qe *QueuedElsewhereError
	if !errors.As(res.Rejected[0].Err, &qe) || qe.Account != a.Party[0].AccountID || qe.Ticket != "b" || qe.Other != "a" {
		t.Errorf("the rejection does not name the account and both tickets: %#v", res.Rejected[0].Err)
	}
	if res.Rejected[1].Index != 2 || !errors.Is(res.Rejected[1].Err, ErrDuplicateTicket) {
		t.Errorf("duplicate id: %+v", res.Rejected[1])
	}
	// The ticket from the future has waited 0.
	for _, s := range res.Searching {
		if s.TicketID == "future" && (s.Elapsed != 0 || s.Band != 100) {
			t.Errorf("future ticket %+v", s)
		}
	}
}

func TestOtherShapes(t *testing.T) {
	// Free-for-all of 6, co-op of 3, 5v5 with mixed parties.
	for _, shape := range []struct{ teams, size int }{{6, 1}, {1, 3}, {2, 5}, {3, 2}} {
		r := rules4v4()
		r.Teams, r.TeamSize = shape.teams, shape.size
		var ts []Ticket
		for i := range shape.teams * shape.size * 3 {
			ts = append(ts, party(strconv.Itoa(i), time.Duration(i)*time.Second, eu, 1400+float64(i*7%150)))
		}
		res := mustForm(t, ts, r)
		if len(res.Matches) != 3 {
			t.Errorf("%d×%d: %d matches", shape.teams, shape.size, len(res.Matches))
		}
	}
}
