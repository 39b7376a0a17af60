package matchmaking

import "slices"

// sizeFit answers one question for Form: can the parties still in the pool
// fill the free seats of a match's teams exactly? It looks at party sizes
// alone. Bands and regions can only make a match harder, so a "no" is
// certain and a "yes" only possible.
//
// Form asks it twice. Before building an anchor's match: an anchor whose
// size the pool cannot complete is skipped without a scan of its window
// (which, once bands have widened, is the whole queue). And before adding a
// party to the match being built: a party that leaves seats no remaining
// party sizes can fill is passed over, as one that does not fit.
//
// Both came from `ludus bench matchmaking` at 5,000 tickets/s. Its queues
// ran out of solo players, and then every anchor's build took the oldest
// party of 3 in its band, which only a solo could complete, and failed: a
// queue of 3,103 tickets holding 810 parties of 4 formed no match at all,
// while any 2 of those parties of 4 make one. Every scan visited millions
// of candidates and the queue grew until tickets timed out
// (docs/BENCHMARKS.md).
type sizeFit struct {
	e               []entry
	teams, teamSize int
	count           []int  // parties of each size in the pool (index = size)
	answer          []int8 // per anchor size: 0 unknown, 1 possible, -1 not
	// window counts, by size, the parties of an anchor's window that build
	// has not yet passed (see former.build).
	window                       []int
	avail, capped, rooms, sorted []int // scratch
	memo                         map[string]bool
	key                          []byte
	nodes                        int  // search steps taken in this Form call
	off                          bool // the search ran out of steps: rule nothing out
}

// sizeFitBudget bounds the search in one Form call. Shapes of a few small
// teams need a handful of steps per question, and answers are remembered;
// large teams with many party sizes could need far more, and there Form
// does without (it builds every anchor and takes any party that fits).
const sizeFitBudget = 1 << 16

func newSizeFit(r Rules, e []entry) *sizeFit {
	s := &sizeFit{
		e:        e,
		teams:    r.Teams,
		teamSize: r.TeamSize,
		count:    make([]int, r.TeamSize+1),
		answer:   make([]int8, r.TeamSize+1),
		window:   make([]int, r.TeamSize+1),
		memo:     make(map[string]bool),
	}
	for i := range e {
		s.count[e[i].size]++
	}
	return s
}

// remove takes a matched party out of the pool. Fewer parties can only fit
// fewer sizes, so only the "possible" answers are forgotten.
func (s *sizeFit) remove(size int) {
	s.count[size]--
	for i, a := range s.answer {
		if a > 0 {
			s.answer[i] = 0
		}
	}
}

// possible reports whether anchor a and other parties of the pool could
// fill every team exactly.
func (s *sizeFit) possible(a int32) bool {
	size := s.e[a].size
	if s.off {
		return true
	}
	if ans := s.answer[size]; ans != 0 {
		return ans > 0
	}
	rooms := append(s.rooms[:0], s.teamSize-size)
	for range s.teams - 1 {
		rooms = append(rooms, s.teamSize)
	}
	s.rooms = rooms
	avail := append(s.avail[:0], s.count...)
	avail[size]--
	s.avail = avail
	ok := s.canFill(rooms, avail) // true once the search is off
	s.answer[size] = -1
	if ok {
		s.answer[size] = 1
	}
	return ok
}

// canFill reports whether parties of the sizes counted in count (index =
// size) could fill rooms (free seats per team) exactly.
func (s *sizeFit) canFill(rooms []int, count []int) bool {
	if s.off {
		return true
	}
	r := s.sorted[:0]
	total := 0
	for _, n := range rooms {
		if n > 0 {
			r = append(r, n)
			total += n
		}
	}
	s.sorted = r
	if total == 0 {
		return true
	}
	slices.SortFunc(r, func(a, b int) int { return b - a })
	// Counted only up to what the rooms could take, so that questions
	// differing in parties that cannot matter share an answer.
	c := append(s.capped[:0], 0)
	for p := 1; p < len(count); p++ {
		c = append(c, max(min(count[p], total/p), 0))
	}
	s.capped = c
	return s.fillTeams(c, r) || s.off
}

// fillTeams reports whether parties from c fill every team of rooms exactly,
// none of them begun: remembered, as the answer depends on nothing else.
func (s *sizeFit) fillTeams(c, rooms []int) bool {
	key := s.keyOf(rooms, c)
	if ok, seen := s.memo[string(key)]; seen {
		return ok
	}
	k := string(key)
	ok := s.fill(c, rooms[1:], rooms[0], s.teamSize)
	if !s.off {
		s.memo[k] = ok
	}
	return ok
}

func (s *sizeFit) keyOf(rooms, c []int) []byte {
	s.key = s.key[:0]
	for _, n := range rooms {
		s.key = append(s.key, byte(n)) // n <= MaxSeats < 255
	}
	s.key = append(s.key, 255)
	for _, n := range c[1:] {
		s.key = append(s.key, byte(n)) // n <= MaxSeats
	}
	return s.key
}

// fill reports whether parties from c fill room seats of the current team
// and then every team of rooms exactly. A team takes its parties largest
// first (none larger than maxPart), so each set of sizes is tried once.
func (s *sizeFit) fill(c []int, rooms []int, room, maxPart int) bool {
	if s.nodes++; s.nodes > sizeFitBudget {
		s.off = true
		return false
	}
	if room == 0 {
		return len(rooms) == 0 || s.fillTeams(c, rooms)
	}
	for p := min(room, maxPart); p >= 1; p-- {
		if c[p] <= 0 {
			continue
		}
		c[p]--
		ok := s.fill(c, rooms, room-p, p)
		c[p]++
		if ok || s.off {
			return ok
		}
	}
	return false
}
