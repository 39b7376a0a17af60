package matchmaking

import (
	"cmp"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"
)

var inf = math.Inf(1)

// Result is what one Form call decided. Every ticket given to Form is in
// exactly one place: a match, TimedOut, Searching or Rejected.
type Result struct {
	// Matches formed, in the order they were formed (oldest anchor
	// first; bot-filled matches last).
	Matches []Match
	// TimedOut lists the tickets that waited MaxWait without a match
	// (never with BotsFillAtTimeout), oldest first. Take them off the
	// queue and tell the players.
	TimedOut []string
	// Searching lists the tickets still waiting, oldest first, with the
	// band they accepted in this round. Keep them queued.
	Searching []Searching
	// Rejected lists the invalid tickets in input order, with why. Take
	// them off the queue; Err is safe to show the player.
	Rejected []Rejection
}

// Match is a formed match.
type Match struct {
	Tickets []string // ticket ids, oldest first
	Region  string   // where to host it
	Teams   []Team   // Rules.Teams teams of Rules.TeamSize seats
	// BotSeats is the number of seats filled by bots: 0 unless the match
	// was formed for timed-out tickets with Rules.BotsFillAtTimeout.
	BotSeats int
	// Spread is the highest ticket rating minus the lowest.
	Spread float64
	// Imbalance is the highest team RatingSum minus the lowest.
	Imbalance float64
	// MaxRTT is the worst member round-trip time to Region, in ms.
	MaxRTT float64
	// OldestWait is how long the match's oldest ticket waited.
	OldestWait time.Duration
}

// Team is one team of a match.
type Team struct {
	Seats []Seat
	// RatingSum is the sum of the seats' ratings, bots included: the
	// quantity teams are balanced on.
	RatingSum float64
}

// Seat is one player of a team, or a bot.
type Seat struct {
	TicketID  string  // "" for a bot
	AccountID string  // "" for a bot
	Rating    float64 // a bot's is the average rating of the match's players
	Bot       bool
}

// Searching is a ticket still waiting.
type Searching struct {
	TicketID string
	Band     float64       // ± rating points accepted in this round
	Elapsed  time.Duration // time waited so far
}

// Rejection is an invalid ticket.
type Rejection struct {
	Index    int    // position in Form's tickets
	TicketID string // as given; may be empty
	Err      error  // wraps one of the package's sentinel errors
}

// QueuedElsewhereError is the rejection of a ticket one of whose players is
// also in another ticket, Other, that Form kept (it is older, or first by
// id). It is ErrAlreadyQueued. A caller that knows which of the two is the
// player's current search (package matchmaker: the newer etcd revision)
// may keep that one instead.
type QueuedElsewhereError struct {
	Account, Ticket, Other string
}

func (e *QueuedElsewhereError) Error() string {
	return fmt.Sprintf("%v: account %q of ticket %q is also in ticket %q; leave the other queue first",
		ErrAlreadyQueued, e.Account, e.Ticket, e.Other)
}

// Is makes a QueuedElsewhereError ErrAlreadyQueued.
func (e *QueuedElsewhereError) Is(target error) bool { return target == ErrAlreadyQueued }

// entry is a valid ticket as Form sees it.
type entry struct {
	ticket  int // index into Form's tickets
	rating  float64
	sum     float64 // sum of member ratings
	band    float64
	elapsed time.Duration
	size    int
	mask    uint64 // regions where every member is within MaxRTT
	rtt     int    // offset of its worst RTT per region in former.rtt
	expired bool
	used    bool
}

// former holds one Form call's state and scratch space.
type former struct {
	rules   Rules
	tickets []Ticket
	regions []string
	seats   int
	e       []entry   // valid tickets, oldest first: an entry's index is its age rank
	rtt     []float64 // worst member RTT, len(regions) per entry

	// The tickets chosen for the match being built, each with its team.
	chosen []int32
	bin    []int
	room   []int // free seats per team
	// room and bin before the last place, to take it back
	saveRoom, saveBin []int
	cand              []int32 // scratch for candidates

	opts formOptions

	pack packer
	bal  balancer
}

// Form forms matches from the tickets of one queue at time now. It is pure:
// the same arguments give the same Result, and it keeps no state — call it
// every scan with the tickets still queued (those in Result.Searching).
// It returns an error only for invalid rules.
//
// Form takes the oldest ticket still unmatched as the anchor and fills its
// match with the oldest tickets inside the anchor's band, adding each if it
// is within every chosen ticket's band and they within its own, it shares a
// region with all of them and the parties still fit into teams.
// A full match is split into teams with the smallest difference of rating
// sums, and placed in the shared region with the lowest worst RTT. An anchor
// whose match cannot be filled stays searching, and the next oldest ticket
// becomes the anchor. See the package documentation for the guarantees.
func Form(now time.Time, tickets []Ticket, rules Rules) (Result, error) {
	return form(now, tickets, rules, formOptions{})
}

// formOptions changes how Form works, not what it decides: tests compare
// the results of each way.
type formOptions struct {
	window       int  // windowAuto, or a mode tests force
	noAnchorSkip bool // build every anchor, even one sizeFit rules out
	builds       *int // if set, counts the anchors built
}

func form(now time.Time, tickets []Ticket, rules Rules, opts formOptions) (Result, error) {
	if err := rules.Validate(); err != nil {
		return Result{}, err
	}
	f := &former{
		opts:    opts,
		rules:   rules,
		tickets: tickets,
		regions: sortedRegions(rules),
		seats:   rules.Seats(),
		room:    make([]int, rules.Teams),
	}
	var res Result
	f.admit(now, &res)

	// Sort by rating; ties by age, so the order is total and deterministic.
	byRating := make([]int32, len(f.e))
	for i := range byRating {
		byRating[i] = int32(i)
	}
	slices.SortFunc(byRating, func(a, b int32) int {
		if c := cmp.Compare(f.e[a].rating, f.e[b].rating); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})

	players := 0
	for i := range f.e {
		players += f.e[i].size
	}
	all := f.newPool(byRating)
	fit := newSizeFit(rules, f.e)
	for a := range f.e {
		if players < f.seats {
			break
		}
		if f.e[a].used || (!opts.noAnchorSkip && !fit.possible(int32(a))) {
			continue
		}
		if opts.builds != nil {
			*opts.builds++
		}
		if !f.build(int32(a), all, fit) {
			continue
		}
		for _, c := range f.chosen {
			all.remove(c)
			fit.remove(f.e[c].size)
			players -= f.e[c].size
		}
		res.Matches = append(res.Matches, f.match(false))
	}

	// Expired tickets left over time out, or get matches with bots among
	// themselves (still within each other's bands and sharing a region).
	if rules.BotsFillAtTimeout {
		var left []int32
		for _, i := range byRating {
			if e := f.e[i]; e.expired && !e.used {
				left = append(left, i)
			}
		}
		expired := f.newPool(left)
		for a := range f.e {
			if e := f.e[a]; !e.expired || e.used {
				continue
			}
			f.build(int32(a), expired, nil) // bots take the seats no party fills
			for _, c := range f.chosen {
				expired.remove(c)
			}
			res.Matches = append(res.Matches, f.match(true))
		}
	}
	for i := range f.e {
		e := &f.e[i]
		switch {
		case e.used:
		case e.expired:
			res.TimedOut = append(res.TimedOut, tickets[e.ticket].ID)
		default:
			res.Searching = append(res.Searching, Searching{TicketID: tickets[e.ticket].ID, Band: e.band, Elapsed: e.elapsed})
		}
	}
	slices.SortFunc(res.Rejected, func(a, b Rejection) int { return cmp.Compare(a.Index, b.Index) })
	return res, nil
}

// admit validates the tickets, rejects the bad ones and duplicates (the older
// ticket wins), and fills f.e, oldest first.
func (f *former) admit(now time.Time, res *Result) {
	reject := func(i int, err error) {
		res.Rejected = append(res.Rejected, Rejection{Index: i, TicketID: f.tickets[i].ID, Err: err})
	}
	nr := len(f.regions)
	f.e = make([]entry, 0, len(f.tickets))
	f.rtt = make([]float64, 0, len(f.tickets)*nr)
	for i, t := range f.tickets {
		if err := t.validateFields(f.rules); err != nil {
			reject(i, err)
			continue
		}
		off := len(f.rtt)
		var mask uint64
		f.rtt, mask = worstRTTs(t, f.regions, f.rules, f.rtt)
		if mask == 0 {
			f.rtt = f.rtt[:off]
			reject(i, errNoRegion(t, f.regions))
			continue
		}
		elapsed := max(now.Sub(t.EnqueuedAt), 0) // a ticket from the future has just arrived
		sum := 0.0
		for _, m := range t.Party {
			sum += m.Rating
		}
		f.e = append(f.e, entry{
			ticket:  i,
			rating:  sum / float64(len(t.Party)),
			sum:     sum,
			band:    f.rules.Band(elapsed),
			elapsed: elapsed,
			size:    len(t.Party),
			mask:    mask,
			rtt:     off,
			expired: elapsed >= f.rules.MaxWait,
		})
	}
	// Oldest first; ties by id, then input order (only duplicate ids tie).
	order := make([]int32, len(f.e))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		ta, tb := &f.tickets[f.e[a].ticket], &f.tickets[f.e[b].ticket]
		if c := ta.EnqueuedAt.Compare(tb.EnqueuedAt); c != 0 {
			return c
		}
		if c := cmp.Compare(ta.ID, tb.ID); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	ids := make(map[string]struct{}, len(f.e))
	accounts := make(map[string]string, len(f.e))
	kept := make([]entry, 0, len(f.e))
	for _, i := range order {
		e := f.e[i]
		t := f.tickets[e.ticket]
		if _, dup := ids[t.ID]; dup {
			reject(e.ticket, fmt.Errorf("%w: %q; give each ticket its own id", ErrDuplicateTicket, t.ID))
			continue
		}
		if err := f.claimAccounts(t, accounts); err != nil {
			reject(e.ticket, err)
			continue
		}
		ids[t.ID] = struct{}{}
		kept = append(kept, e)
	}
	f.e = kept
}

func (f *former) claimAccounts(t Ticket, accounts map[string]string) error {
	for _, m := range t.Party {
		if other, ok := accounts[m.AccountID]; ok {
			return &QueuedElsewhereError{Account: m.AccountID, Ticket: t.ID, Other: other}
		}
	}
	for _, m := range t.Party {
		accounts[m.AccountID] = t.ID
	}
	return nil
}

// build collects into f.chosen (with teams in f.bin) the tickets of a match
// anchored at a, taken from p oldest first. It reports whether the match is
// full; either way f.chosen holds at least a.
//
// Each ticket that fits is taken. If that fails and fit is given, build
// tries once more, passing over a party that would leave seats which the
// parties further on in the anchor's window (those that could meet the
// anchor) have no sizes to fill: the oldest party of 3 must not take the
// place of two parties of 4 when no solo player can complete it (sizeFit).
// The first try keeps the common case, a match found early in a wide
// window, to one short scan.
func (f *former) build(a int32, p *pool, fit *sizeFit) bool {
	if f.fill(a, p, nil) {
		return true
	}
	if fit == nil || fit.off {
		return false
	}
	ea := &f.e[a]
	clear(fit.window)
	for c := range f.candidates(p, a) {
		if ec := &f.e[c]; f.reaches(ea, ec) {
			fit.window[ec.size]++
		}
	}
	return f.fill(a, p, fit)
}

// reaches reports whether c could be in a match anchored at a: within
// each other's bands and sharing a region.
func (f *former) reaches(a, c *entry) bool {
	return a.mask&c.mask != 0 && meet(a, c)
}

// fill is one try of build; with fit, it looks ahead by fit.window.
func (f *former) fill(a int32, p *pool, fit *sizeFit) bool {
	ea := &f.e[a]
	f.chosen = append(f.chosen[:0], a)
	f.bin = append(f.bin[:0], 0)
	for t := range f.room {
		f.room[t] = f.rules.TeamSize
	}
	f.room[0] -= ea.size
	count, mask := ea.size, ea.mask
	if count == f.seats {
		return true
	}
	for c := range f.candidates(p, a) {
		ec := &f.e[c]
		if fit != nil && f.reaches(ea, ec) {
			fit.window[ec.size]-- // passed: what is left lies further on
		}
		if count+ec.size > f.seats || mask&ec.mask == 0 || !f.inBands(ec) {
			continue
		}
		if fit != nil {
			f.saveRoom = append(f.saveRoom[:0], f.room...)
			f.saveBin = append(f.saveBin[:0], f.bin...)
		}
		if !f.place(c) {
			continue
		}
		if fit != nil && count+ec.size < f.seats && !fit.canFill(f.room, fit.window) {
			f.chosen = f.chosen[:len(f.chosen)-1]
			f.bin = append(f.bin[:0], f.saveBin...)
			copy(f.room, f.saveRoom)
			continue
		}
		count += ec.size
		mask &= ec.mask
		if count == f.seats {
			return true
		}
	}
	return false
}

// candidates yields the tickets of p other than a within a's band, oldest
// first. It finds them one of two ways, with the same result: a narrow
// window is collected from the rating order and sorted by age; from a wide
// one, the age order is scanned (stopping early once the match is full)
// skipping the tickets outside the window.
func (f *former) candidates(p *pool, a int32) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		ea := &f.e[a]
		lo, hi := ea.rating-ea.band, ea.rating+ea.band
		w := upperBound(p.ratings, hi) - lowerBound(p.ratings, lo)
		if f.useRatingWindow(w, len(p.ratings)) {
			cand := f.cand[:0]
			r := p.byRating
			pos := r.pos[a]
			for q := r.prev[pos]; q >= 0 && p.ratings[q] >= lo; q = r.prev[q] {
				cand = append(cand, r.at[q])
			}
			for q := r.next[pos]; q >= 0 && p.ratings[q] <= hi; q = r.next[q] {
				cand = append(cand, r.at[q])
			}
			slices.Sort(cand) // entry index is age rank
			f.cand = cand
			for _, c := range cand {
				if !yield(c) {
					return
				}
			}
			return
		}
		g := p.byAge
		for q := g.head; q >= 0; q = g.next[q] {
			c := g.at[q]
			if c == a {
				continue
			}
			if r := f.e[c].rating; r < lo || r > hi {
				continue
			}
			if !yield(c) {
				return
			}
		}
	}
}

// useRatingWindow chooses how candidates finds a window of w tickets (counting
// matched ones) in a pool of n: by rating when sorting the window costs less
// than the expected age scan, which visits about seats·n/w tickets.
func (f *former) useRatingWindow(w, n int) bool {
	switch f.opts.window {
	case windowByRating:
		return true
	case windowByAge:
		return false
	}
	return w*w <= 2*f.seats*n
}

// Window modes, for tests: both must give the same matches.
const (
	windowAuto = iota
	windowByRating
	windowByAge
)

func lowerBound(xs []float64, x float64) int {
	i, _ := slices.BinarySearch(xs, x)
	return i
}

func upperBound(xs []float64, x float64) int {
	i, _ := slices.BinarySearchFunc(xs, x, func(e, t float64) int {
		if e <= t {
			return -1
		}
		return 1
	})
	return i
}

// inBands reports whether c and every chosen ticket are within each other's
// bands.
func (f *former) inBands(c *entry) bool {
	for _, s := range f.chosen {
		if !meet(c, &f.e[s]) {
			return false
		}
	}
	return true
}

// meet reports whether a and b are within each other's bands.
func meet(a, b *entry) bool {
	return math.Abs(a.rating-b.rating) <= min(a.band, b.band)
}

// place adds c to f.chosen if the parties still fit into teams: into the
// fullest team with room, or else by repacking every chosen party.
func (f *former) place(c int32) bool {
	size := f.e[c].size
	best := -1
	for t, r := range f.room {
		if r >= size && (best < 0 || r < f.room[best]) {
			best = t
		}
	}
	if best >= 0 {
		f.chosen = append(f.chosen, c)
		f.bin = append(f.bin, best)
		f.room[best] -= size
		return true
	}
	sizes := f.pack.sizes[:0]
	for _, s := range f.chosen {
		sizes = append(sizes, f.e[s].size)
	}
	sizes = append(sizes, size)
	f.pack.sizes = sizes
	bins, ok := f.pack.pack(f.rules.Teams, f.rules.TeamSize)
	if !ok {
		return false
	}
	f.chosen = append(f.chosen, c)
	f.bin = append(f.bin[:0], bins...)
	for t := range f.room {
		f.room[t] = f.rules.TeamSize
	}
	for k, s := range f.chosen {
		f.room[f.bin[k]] -= f.e[s].size
	}
	return true
}

// match marks f.chosen used and turns it into a Match: region, balanced
// teams, bots for any empty seat.
func (f *former) match(bots bool) Match {
	nr := len(f.regions)
	mask := ^uint64(0)
	humans, humanSum := 0, 0.0
	lo, hi := inf, -inf
	for _, c := range f.chosen {
		e := &f.e[c]
		e.used = true
		mask &= e.mask
		humans += e.size
		humanSum += e.sum
		lo, hi = min(lo, e.rating), max(hi, e.rating)
	}
	region, worst := -1, inf
	for r := range nr {
		if mask&(1<<r) == 0 {
			continue
		}
		w := 0.0
		for _, c := range f.chosen {
			w = max(w, f.rtt[f.e[c].rtt+r])
		}
		if w < worst {
			region, worst = r, w
		}
	}
	botRating := 0.0
	if bots {
		botRating = humanSum / float64(humans)
	}
	bins := f.bal.balance(f, botRating)

	// Output in age order: sort chosen (with its bins) by entry index.
	order := make([]int, len(f.chosen))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(f.chosen[a], f.chosen[b]) })
	m := Match{
		Tickets:    make([]string, 0, len(f.chosen)),
		Region:     f.regions[region],
		Teams:      make([]Team, f.rules.Teams),
		Spread:     hi - lo,
		MaxRTT:     worst,
		OldestWait: f.e[f.chosen[order[0]]].elapsed,
	}
	for t := range m.Teams {
		m.Teams[t].Seats = make([]Seat, 0, f.rules.TeamSize)
	}
	for _, k := range order {
		t := f.tickets[f.e[f.chosen[k]].ticket]
		m.Tickets = append(m.Tickets, t.ID)
		team := &m.Teams[bins[k]]
		for _, mem := range t.Party {
			team.Seats = append(team.Seats, Seat{TicketID: t.ID, AccountID: mem.AccountID, Rating: mem.Rating})
			team.RatingSum += mem.Rating
		}
	}
	lo, hi = inf, -inf
	for t := range m.Teams {
		team := &m.Teams[t]
		for len(team.Seats) < f.rules.TeamSize {
			team.Seats = append(team.Seats, Seat{Rating: botRating, Bot: true})
			team.RatingSum += botRating
			m.BotSeats++
		}
		lo, hi = min(lo, team.RatingSum), max(hi, team.RatingSum)
	}
	m.Imbalance = hi - lo
	return m
}

// pool is the set of tickets a match may still take, in two orders: by
// rating, to find a band's window, and by age, to take the oldest first.
type pool struct {
	byRating *list
	ratings  []float64 // rating at each position of byRating (matched ones too)
	byAge    *list
}

// newPool makes a pool of the entries in byRating, which is in rating order.
func (f *former) newPool(byRating []int32) *pool {
	p := &pool{
		byRating: newList(byRating, len(f.e)),
		ratings:  make([]float64, len(byRating)),
		byAge:    newList(slices.Sorted(slices.Values(byRating)), len(f.e)),
	}
	for q, e := range byRating {
		p.ratings[q] = f.e[e].rating
	}
	return p
}

func (p *pool) remove(e int32) {
	p.byRating.remove(e)
	p.byAge.remove(e)
}

// list is a doubly linked list over entries in some order, from which
// matched entries are removed in O(1), so sweeps skip them for free.
type list struct {
	at         []int32 // position -> entry
	pos        []int32 // entry -> position
	prev, next []int32 // position -> neighbouring position, -1 at the ends
	head       int32   // first position, -1 when empty
}

func newList(order []int32, entries int) *list {
	l := &list{
		at:   order,
		pos:  make([]int32, entries),
		prev: make([]int32, len(order)),
		next: make([]int32, len(order)),
		head: -1,
	}
	for p, e := range order {
		l.pos[e] = int32(p)
		l.prev[p] = int32(p) - 1
		l.next[p] = int32(p) + 1
	}
	if n := len(order); n > 0 {
		l.next[n-1] = -1
		l.head = 0
	}
	return l
}

func (l *list) remove(e int32) {
	p := l.pos[e]
	pr, nx := l.prev[p], l.next[p]
	if pr >= 0 {
		l.next[pr] = nx
	} else {
		l.head = nx
	}
	if nx >= 0 {
		l.prev[nx] = pr
	}
}
