package matchmaking

import (
	"cmp"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkResult checks every guarantee of Form on one result.
func checkResult(t testing.TB, now time.Time, tickets []Ticket, r Rules, res Result) {
	t.Helper()
	rejected := map[int]bool{}
	for _, rj := range res.Rejected {
		if rejected[rj.Index] || rj.Index < 0 || rj.Index >= len(tickets) {
			t.Fatalf("rejection index %d repeated or out of range", rj.Index)
		}
		rejected[rj.Index] = true
		if rj.Err == nil || !strings.HasPrefix(rj.Err.Error(), "matchmaking: ") || rj.TicketID != tickets[rj.Index].ID {
			t.Fatalf("rejection %+v", rj)
		}
	}
	byID := map[string]Ticket{}
	accounts := map[string]bool{}
	for i, tk := range tickets {
		if rejected[i] {
			continue
		}
		if _, dup := byID[tk.ID]; dup {
			t.Fatalf("two tickets with id %q accepted", tk.ID)
		}
		if err := tk.Validate(r); err != nil {
			t.Fatalf("invalid ticket %q accepted: %v", tk.ID, err)
		}
		for _, m := range tk.Party {
			if accounts[m.AccountID] {
				t.Fatalf("account %q accepted in two tickets", m.AccountID)
			}
			accounts[m.AccountID] = true
		}
		byID[tk.ID] = tk
	}
	seen := map[string]string{}
	mark := func(id, where string) {
		if _, ok := byID[id]; !ok {
			t.Fatalf("%s names unknown or rejected ticket %q", where, id)
		}
		if prev, ok := seen[id]; ok {
			t.Fatalf("ticket %q is in %s and in %s", id, prev, where)
		}
		seen[id] = where
	}
	elapsed := func(tk Ticket) time.Duration { return max(now.Sub(tk.EnqueuedAt), 0) }
	for mi, m := range res.Matches {
		where := "match " + strconv.Itoa(mi)
		for _, id := range m.Tickets {
			mark(id, where)
		}
		checkMatch(t, where, m, byID, r, elapsed)
	}
	for _, id := range res.TimedOut {
		mark(id, "timed out")
		if r.BotsFillAtTimeout || elapsed(byID[id]) < r.MaxWait {
			t.Fatalf("ticket %q timed out after %v (bots %v)", id, elapsed(byID[id]), r.BotsFillAtTimeout)
		}
	}
	for _, s := range res.Searching {
		mark(s.TicketID, "searching")
		e := elapsed(byID[s.TicketID])
		if s.Elapsed != e || s.Band != r.Band(e) || e >= r.MaxWait {
			t.Fatalf("searching %+v, elapsed %v band %v", s, e, r.Band(e))
		}
	}
	if len(seen) != len(byID) {
		t.Fatalf("%d tickets accepted, %d accounted for: tickets lost", len(byID), len(seen))
	}
}

func avgRating(tk Ticket) float64 {
	s := 0.0
	for _, m := range tk.Party {
		s += m.Rating
	}
	return s / float64(len(tk.Party))
}

func checkMatch(t testing.TB, where string, m Match, byID map[string]Ticket, r Rules, elapsed func(Ticket) time.Duration) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(where+": "+format+"\n%+v", append(args, m)...)
	}
	tks := make([]Ticket, len(m.Tickets))
	for i, id := range m.Tickets {
		tks[i] = byID[id]
	}
	if !slices.IsSortedFunc(tks, func(a, b Ticket) int {
		return cmp.Or(a.EnqueuedAt.Compare(b.EnqueuedAt), cmp.Compare(a.ID, b.ID))
	}) {
		fail("tickets not oldest first")
	}
	// Seats: exact shape, parties whole and in one team, bots only when allowed.
	if len(m.Teams) != r.Teams {
		fail("%d teams, want %d", len(m.Teams), r.Teams)
	}
	teamOf := map[string]int{}
	seatsOf := map[string]int{}
	bots, humans, humanSum := 0, 0, 0.0
	for ti, team := range m.Teams {
		if len(team.Seats) != r.TeamSize {
			fail("team %d has %d seats, want %d", ti, len(team.Seats), r.TeamSize)
		}
		sum := 0.0
		for _, s := range team.Seats {
			sum += s.Rating
			if s.Bot {
				bots++
				continue
			}
			tk, ok := byID[s.TicketID]
			if !ok || !slices.Contains(m.Tickets, s.TicketID) {
				fail("seat of unknown ticket %q", s.TicketID)
			}
			if prev, ok := teamOf[s.TicketID]; ok && prev != ti {
				fail("party %q split between teams %d and %d", s.TicketID, prev, ti)
			}
			teamOf[s.TicketID] = ti
			k := seatsOf[s.TicketID]
			if k >= len(tk.Party) || tk.Party[k].AccountID != s.AccountID || tk.Party[k].Rating != s.Rating {
				fail("seat %+v is not member %d of %q", s, k, s.TicketID)
			}
			seatsOf[s.TicketID]++
			humans++
			humanSum += s.Rating
		}
		if math.Abs(sum-team.RatingSum) > 1e-6 {
			fail("team %d RatingSum %v, seats sum to %v", ti, team.RatingSum, sum)
		}
	}
	for _, tk := range tks {
		if seatsOf[tk.ID] != len(tk.Party) {
			fail("ticket %q has %d of %d members seated", tk.ID, seatsOf[tk.ID], len(tk.Party))
		}
	}
	if bots != m.BotSeats {
		fail("%d bot seats, BotSeats %d", bots, m.BotSeats)
	}
	if bots > 0 {
		if !r.BotsFillAtTimeout {
			fail("bots without BotsFillAtTimeout")
		}
		for _, tk := range tks {
			if elapsed(tk) < r.MaxWait {
				fail("bot match includes ticket %q that has not timed out", tk.ID)
			}
		}
		for _, team := range m.Teams {
			for _, s := range team.Seats {
				if s.Bot && math.Abs(s.Rating-humanSum/float64(humans)) > 1e-6 {
					fail("bot rating %v, players' average %v", s.Rating, humanSum/float64(humans))
				}
			}
		}
	}
	// Bands: pairwise mutual; spread within the oldest ticket's band.
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, a := range tks {
		ra := avgRating(a)
		lo, hi = min(lo, ra), max(hi, ra)
		for _, b := range tks[:i] {
			if d := math.Abs(ra - avgRating(b)); d > min(r.Band(elapsed(a)), r.Band(elapsed(b))) {
				fail("tickets %q and %q are %v apart, bands %v and %v", a.ID, b.ID, d, r.Band(elapsed(a)), r.Band(elapsed(b)))
			}
		}
	}
	if math.Abs(m.Spread-(hi-lo)) > 1e-9 || m.Spread > r.Band(elapsed(tks[0])) || m.OldestWait != elapsed(tks[0]) {
		fail("spread %v (want %v), oldest band %v, oldest wait %v", m.Spread, hi-lo, r.Band(elapsed(tks[0])), m.OldestWait)
	}
	// Region: within every limit, and the best such region.
	worstIn := func(region string) float64 {
		w := 0.0
		for _, tk := range tks {
			for _, mem := range tk.Party {
				ms, ok := mem.RTT[region]
				if !ok {
					return math.Inf(1)
				}
				w = max(w, ms)
			}
		}
		return w
	}
	limit, ok := r.MaxRTT[m.Region]
	if w := worstIn(m.Region); !ok || w > limit || w != m.MaxRTT {
		fail("region %q: worst RTT %v, limit %v (listed %v), MaxRTT %v", m.Region, w, limit, ok, m.MaxRTT)
	}
	for region, limit := range r.MaxRTT {
		if w := worstIn(region); w <= limit && w < m.MaxRTT {
			fail("region %q has worst RTT %v, better than %q", region, w, m.Region)
		}
	}
	// Balance.
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, team := range m.Teams {
		lo, hi = min(lo, team.RatingSum), max(hi, team.RatingSum)
	}
	if math.Abs(m.Imbalance-(hi-lo)) > 1e-6 {
		fail("Imbalance %v, teams differ by %v", m.Imbalance, hi-lo)
	}
	botRating := 0.0
	if bots > 0 {
		botRating = humanSum / float64(humans)
	}
	if best, ok := bruteBalance(tks, r, botRating); ok {
		if m.Imbalance > best+1e-6 {
			fail("imbalance %v, best possible %v", m.Imbalance, best)
		}
	} else if improved := swapImproves(m, tks, teamOf, r, botRating); improved != "" {
		fail("not balanced: %s", improved)
	}
}

// bruteBalance returns the lowest imbalance over every split of tks into
// teams, if there are few enough splits to try them all.
func bruteBalance(tks []Ticket, r Rules, botRating float64) (float64, bool) {
	if math.Pow(float64(r.Teams), float64(len(tks))) > 1<<20 {
		return 0, false
	}
	fill := make([]int, r.Teams)
	sums := make([]float64, r.Teams)
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == len(tks) {
			lo, hi := math.Inf(1), math.Inf(-1)
			for t := range sums {
				s := sums[t] + float64(r.TeamSize-fill[t])*botRating
				lo, hi = min(lo, s), max(hi, s)
			}
			best = min(best, hi-lo)
			return
		}
		n, s := len(tks[i].Party), avgRating(tks[i])*float64(len(tks[i].Party))
		for t := range fill {
			if fill[t]+n <= r.TeamSize {
				fill[t] += n
				sums[t] += s
				rec(i + 1)
				fill[t] -= n
				sums[t] -= s
			}
		}
	}
	rec(0)
	return best, true
}

// swapImproves describes a swap of two equal-sized parties between teams that
// would lower the imbalance, or returns "".
func swapImproves(m Match, tks []Ticket, teamOf map[string]int, r Rules, botRating float64) string {
	sums := make([]float64, len(m.Teams))
	for i, team := range m.Teams {
		sums[i] = team.RatingSum
	}
	spread := func() float64 { return slices.Max(sums) - slices.Min(sums) }
	base := spread()
	for i, a := range tks {
		for _, b := range tks[:i] {
			ta, tb := teamOf[a.ID], teamOf[b.ID]
			if ta == tb || len(a.Party) != len(b.Party) {
				continue
			}
			d := avgRating(a)*float64(len(a.Party)) - avgRating(b)*float64(len(b.Party))
			sums[ta] -= d
			sums[tb] += d
			s := spread()
			sums[ta] += d
			sums[tb] -= d
			if s < base-1e-6 {
				return "swapping " + a.ID + " and " + b.ID
			}
		}
	}
	return ""
}

var shapes = []struct{ teams, size int }{{2, 4}, {2, 5}, {2, 2}, {4, 1}, {8, 1}, {3, 3}, {1, 4}, {2, 1}, {4, 4}, {2, 8}}

func randomRules(rng *rand.Rand) Rules {
	s := shapes[rng.IntN(len(shapes))]
	r := DefaultRules("acme", "duel", map[string]float64{"eu": 80, "us": 100})
	r.Teams, r.TeamSize = s.teams, s.size
	r.BotsFillAtTimeout = rng.IntN(2) == 0
	r.BandStart = 25 + rng.Float64()*150
	r.BandStep = rng.Float64() * 100
	r.BandCap = r.BandStart + rng.Float64()*600
	return r
}

// population makes n tickets: ratings ~N(1500, 300), parties of 1 to 4,
// random RTTs to two regions, waits up to 1.3 × MaxWait. With bad > 0, about
// that fraction are broken in one of several ways.
func population(rng *rand.Rand, r Rules, now time.Time, n int, bad float64) []Ticket {
	clamp := func(v float64) float64 { return min(max(v, MinRating), MaxRating) }
	var ts []Ticket
	for i := range n {
		size := 1 + rng.IntN(min(4, r.TeamSize))
		base := 1500 + 300*rng.NormFloat64()
		tk := Ticket{
			ID: "t" + strconv.Itoa(i), Tenant: r.Tenant, Mode: r.Mode,
			EnqueuedAt: now.Add(-time.Duration(rng.Float64() * 1.3 * float64(r.MaxWait))),
		}
		for j := range size {
			rtt := map[string]float64{}
			for _, region := range []string{"eu", "us"} {
				if rng.IntN(10) > 0 {
					rtt[region] = math.Round(5 + 145*rng.Float64())
				}
			}
			tk.Party = append(tk.Party, Member{
				AccountID: tk.ID + "." + strconv.Itoa(j),
				Rating:    clamp(base + 100*rng.NormFloat64()),
				RTT:       rtt,
			})
		}
		if rng.Float64() < bad && i > 0 {
			switch rng.IntN(6) {
			case 0:
				tk.Party[0].Rating = math.NaN()
			case 1:
				tk.Party = nil
			case 2:
				tk.Party[0].AccountID = ts[rng.IntN(len(ts))].Party[0].AccountID
			case 3:
				tk.ID = ts[rng.IntN(len(ts))].ID
			case 4:
				tk.Mode = "other"
			case 5:
				tk.Party[0].RTT["eu"] = -1
			}
		}
		ts = append(ts, tk)
	}
	return ts
}

func TestPropertyForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 37))
	matches, builds, buildsAll := 0, 0, 0
	for round := range 300 {
		r := randomRules(rng)
		ts := population(rng, r, t0, rng.IntN(300), 0.03)
		if round%3 == 0 {
			// No solo players: parties of 3 in teams of 4 cannot be
			// completed, which Form must see without holding up others.
			ts = slices.DeleteFunc(ts, func(tk Ticket) bool { return len(tk.Party) == 1 })
		}
		res, err := form(t0, ts, r, formOptions{builds: &builds})
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, t0, ts, r, res)
		matches += len(res.Matches)
		// Skipping the anchors sizeFit rules out changes nothing.
		all, err := form(t0, ts, r, formOptions{noAnchorSkip: true, builds: &buildsAll})
		if err != nil || !reflect.DeepEqual(all, res) {
			t.Fatalf("round %d: building every anchor gave a different result", round)
		}
		// Deterministic, and both ways of finding candidates agree.
		for _, opts := range []formOptions{{window: windowAuto}, {window: windowByRating}, {window: windowByAge}} {
			again, err := form(t0, ts, r, opts)
			if err != nil || !reflect.DeepEqual(again, res) {
				t.Fatalf("round %d: options %+v gave a different result", round, opts)
			}
		}
	}
	if matches < 1000 {
		t.Fatalf("only %d matches in 300 populations: the test is not exercising Form", matches)
	}
	// The comparison above means something only if sizeFit skipped anchors.
	if buildsAll-builds < 100 {
		t.Fatalf("sizeFit skipped %d of %d anchors: the test is not exercising it", buildsAll-builds, buildsAll)
	}
	t.Logf("%d matches; sizeFit skipped %d of %d anchors", matches, buildsAll-builds, buildsAll)
}

func TestPropertyOrderDoesNotMatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		r := randomRules(rng)
		ts := population(rng, r, t0, 200, 0)
		res, err := Form(t0, ts, r)
		if err != nil {
			t.Fatal(err)
		}
		rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
		shuffled, err := Form(t0, ts, r)
		if err != nil {
			t.Fatal(err)
		}
		// Only the rejections' indexes may change.
		reasons := func(rs []Rejection) []string {
			var out []string
			for _, rj := range rs {
				out = append(out, rj.Err.Error())
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(reasons(res.Rejected), reasons(shuffled.Rejected)) {
			t.Fatal("shuffling the tickets changed the rejections")
		}
		res.Rejected, shuffled.Rejected = nil, nil
		if len(res.Matches) == 0 || !reflect.DeepEqual(res, shuffled) {
			t.Fatalf("shuffling the tickets changed the result (%d matches)", len(res.Matches))
		}
	}
}

// A queue scanned every 2 s on a fake clock with arrivals: every result
// checks out, and every ticket ends matched, timed out or still queued.
func TestPropertyQueueOverTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(99, 1))
	for range 5 {
		r := randomRules(rng)
		var queue []Ticket
		final := map[string]string{}
		n := 0
		now := t0
		for range 60 {
			now = now.Add(2 * time.Second)
			for _, tk := range population(rng, r, now, rng.IntN(40), 0) {
				tk.ID = "q" + strconv.Itoa(n)
				for j := range tk.Party {
					tk.Party[j].AccountID = tk.ID + "." + strconv.Itoa(j)
				}
				tk.EnqueuedAt = now.Add(-time.Duration(rng.IntN(2000)) * time.Millisecond)
				n++
				queue = append(queue, tk)
			}
			res, err := Form(now, queue, r)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, now, queue, r, res)
			for _, m := range res.Matches {
				for _, id := range m.Tickets {
					final[id] = "matched"
				}
			}
			for _, id := range res.TimedOut {
				final[id] = "timed out"
			}
			for _, rj := range res.Rejected {
				final[rj.TicketID] = "rejected"
			}
			queue = slices.DeleteFunc(queue, func(tk Ticket) bool { return final[tk.ID] != "" })
			if len(queue) != len(res.Searching) {
				t.Fatalf("queue %d, searching %d", len(queue), len(res.Searching))
			}
		}
		if len(final)+len(queue) != n {
			t.Fatalf("%d tickets, %d ended and %d queued", n, len(final), len(queue))
		}
		for _, tk := range queue {
			if now.Sub(tk.EnqueuedAt) >= r.MaxWait {
				t.Fatalf("ticket %q waited %v and is still queued", tk.ID, now.Sub(tk.EnqueuedAt))
			}
		}
	}
}

// The checker itself must catch broken results.
func TestCheckerCatchesBrokenResults(t *testing.T) {
	r := rules4v4()
	var ts []Ticket
	for i := range 8 {
		ts = append(ts, party("s"+strconv.Itoa(i), time.Second, eu, 1000+float64(i)*10))
	}
	good, err := Form(t0, ts, r)
	if err != nil {
		t.Fatal(err)
	}
	breakers := map[string]func(*Result){
		"lost ticket":    func(res *Result) { res.Matches = nil },
		"ticket twice":   func(res *Result) { res.Searching = append(res.Searching, Searching{TicketID: "s0"}) },
		"unbalanced":     func(res *Result) { swapSeats(res, 0, 0, 1, 0) },
		"wrong region":   func(res *Result) { res.Matches[0].Region = "us" },
		"split party":    func(res *Result) { res.Matches[0].Teams[0].Seats[0].TicketID = "s7" },
		"missing seat":   func(res *Result) { res.Matches[0].Teams[0].Seats = res.Matches[0].Teams[0].Seats[1:] },
		"wrong spread":   func(res *Result) { res.Matches[0].Spread = 1 },
		"bots not asked": func(res *Result) { res.Matches[0].BotSeats = 1 },
	}
	for name, brk := range breakers {
		res := cloneResult(good)
		brk(&res)
		ft := &fakeT{}
		func() {
			defer func() { recover() }()
			checkResult(ft, t0, ts, r, res)
		}()
		if !ft.failed {
			t.Errorf("checker missed %s", name)
		}
	}
}

func swapSeats(res *Result, t1, s1, t2, s2 int) {
	m := &res.Matches[0]
	a, b := m.Teams[t1].Seats[s1], m.Teams[t2].Seats[s2]
	m.Teams[t1].Seats[s1], m.Teams[t2].Seats[s2] = b, a
	m.Teams[t1].RatingSum += b.Rating - a.Rating
	m.Teams[t2].RatingSum += a.Rating - b.Rating
	m.Imbalance = math.Abs(m.Teams[0].RatingSum - m.Teams[1].RatingSum)
}

func cloneResult(r Result) Result {
	c := r
	c.Matches = slices.Clone(r.Matches)
	for i := range c.Matches {
		c.Matches[i].Teams = slices.Clone(r.Matches[i].Teams)
		for j := range c.Matches[i].Teams {
			c.Matches[i].Teams[j].Seats = slices.Clone(r.Matches[i].Teams[j].Seats)
		}
	}
	c.Searching = slices.Clone(r.Searching)
	return c
}

// fakeT records a failure and stops the checker by panicking.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
