package matchmaking

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// SimScanInterval is how often Simulate calls Form: every 2 s, as the field
// report's matcher scans its queue.
const SimScanInterval = 2 * time.Second

// Limits of Simulate's arguments.
const (
	SimMaxArrivalsPerSec = 100_000
	SimMaxDuration       = 24 * time.Hour
	SimMaxTickets        = 10_000_000 // arrivalsPerSec × duration
)

// SimReport is the outcome of Simulate.
type SimReport struct {
	Tickets  int // tickets that arrived
	Players  int // players in them
	Scans    int // Form calls
	Matches  int
	BotSeats int

	Matched   int // tickets matched
	TimedOut  int // tickets that timed out
	Searching int // tickets still queued when the simulation ended
	Rejected  int // tickets Form rejected (parties with no common region)

	// Time from joining the queue to being matched, over matched tickets;
	// it includes the wait for the next scan.
	TimeToMatchP50, TimeToMatchP99 time.Duration
	// Over matches: the rating spread (highest minus lowest ticket
	// rating), the team imbalance (highest minus lowest team rating sum)
	// and the worst member RTT in the chosen region (ms).
	RatingSpreadP50, RatingSpreadP99 float64
	ImbalanceP99                     float64
	MaxRTTP99                        float64
}

// Simulate runs a queue with the given rules for duration of simulated time
// and reports how fast and how well it matched. Tickets arrive as a Poisson
// process at arrivalsPerSec; Form runs every SimScanInterval on a fake clock,
// so the report depends only on the arguments.
//
// The population: party ratings ~N(1500, 300) and each member's rating the
// party's ±N(0, 100), clamped to [MinRating, MaxRating]; parties of 1 (55 %),
// 2 (25 %), 3 (10 %) or 4 (10 %) players, never more than Rules.TeamSize; each
// party lives near one of the rules' regions, chosen uniformly, where each
// member's RTT is 10 % to 75 % of that region's MaxRTT, and 50 % to 250 % of
// the limit elsewhere (so some parties can play in two regions).
func Simulate(rules Rules, arrivalsPerSec float64, duration time.Duration, seed uint64) (SimReport, error) {
	if err := rules.Validate(); err != nil {
		return SimReport{}, err
	}
	if !(arrivalsPerSec > 0 && arrivalsPerSec <= SimMaxArrivalsPerSec) {
		return SimReport{}, fmt.Errorf("matchmaking: arrivals per second %v must be in (0, %d]", arrivalsPerSec, SimMaxArrivalsPerSec)
	}
	if duration <= 0 || duration > SimMaxDuration {
		return SimReport{}, fmt.Errorf("matchmaking: simulated duration %v must be in (0, %v]", duration, SimMaxDuration)
	}
	if arrivalsPerSec*duration.Seconds() > SimMaxTickets {
		return SimReport{}, fmt.Errorf("matchmaking: %v arrivals/s for %v is more than %d tickets", arrivalsPerSec, duration, SimMaxTickets)
	}

	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	regions := sortedRegions(rules)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(duration)
	gap := func() time.Duration {
		return time.Duration(rng.ExpFloat64() / arrivalsPerSec * float64(time.Second))
	}
	var (
		rep     SimReport
		queue   []Ticket
		waits   []time.Duration
		spreads []float64
		imbal   []float64
		rtts    []float64
	)
	newTicket := func(at time.Time) Ticket {
		t := Ticket{ID: "t" + strconv.Itoa(rep.Tickets), Tenant: rules.Tenant, Mode: rules.Mode, EnqueuedAt: at,
			Party: SyntheticParty(rng, regions, rules.MaxRTT, rules.TeamSize)}
		for i := range t.Party {
			t.Party[i].AccountID = "a" + strconv.Itoa(rep.Players)
			rep.Players++
		}
		rep.Tickets++
		return t
	}

	next := start.Add(gap())
	enqueued := make(map[string]time.Time)
	for now := start.Add(SimScanInterval); !now.After(end); now = now.Add(SimScanInterval) {
		for !next.After(now) {
			t := newTicket(next)
			queue = append(queue, t)
			enqueued[t.ID] = t.EnqueuedAt
			next = next.Add(gap())
		}
		res, err := Form(now, queue, rules)
		if err != nil {
			return SimReport{}, err
		}
		rep.Scans++
		for _, m := range res.Matches {
			rep.Matches++
			rep.BotSeats += m.BotSeats
			spreads = append(spreads, m.Spread)
			imbal = append(imbal, m.Imbalance)
			rtts = append(rtts, m.MaxRTT)
			for _, id := range m.Tickets {
				waits = append(waits, now.Sub(enqueued[id]))
				delete(enqueued, id)
			}
		}
		rep.Matched += countTickets(res.Matches)
		rep.TimedOut += len(res.TimedOut)
		rep.Rejected += len(res.Rejected)
		for _, id := range res.TimedOut {
			delete(enqueued, id)
		}
		for _, r := range res.Rejected {
			delete(enqueued, r.TicketID)
		}
		queue = slices.DeleteFunc(queue, func(t Ticket) bool {
			_, ok := enqueued[t.ID]
			return !ok
		})
	}
	rep.Searching = len(queue)
	rep.TimeToMatchP50 = percentile(waits, 0.50)
	rep.TimeToMatchP99 = percentile(waits, 0.99)
	rep.RatingSpreadP50 = percentile(spreads, 0.50)
	rep.RatingSpreadP99 = percentile(spreads, 0.99)
	rep.ImbalanceP99 = percentile(imbal, 0.99)
	rep.MaxRTTP99 = percentile(rtts, 0.99)
	return rep, nil
}

func countTickets(ms []Match) int {
	n := 0
	for _, m := range ms {
		n += len(m.Tickets)
	}
	return n
}

// percentile returns the nearest-rank q-quantile of xs (sorting it), or 0.
func percentile[T int64 | float64 | time.Duration](xs []T, q float64) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// SyntheticParty draws one party of the simulated population (Simulate, and
// `ludus bench matchmaking`): 1 player (55 %), 2 (25 %), 3 (10 %) or 4 (10 %),
// at most maxSize; a party mean rating from N(1500, 300) and each member's
// rating from N(mean, 100), kept in [MinRating, MaxRating]; and per region a
// round trip drawn from 10–75 % of maxRTT in one home region, 50–250 % in the
// others. AccountIDs are left for the caller.
func SyntheticParty(rng *rand.Rand, regions []string, maxRTT map[string]float64, maxSize int) []Member {
	size := 1
	switch x := rng.Float64(); {
	case x >= 0.9:
		size = 4
	case x >= 0.8:
		size = 3
	case x >= 0.55:
		size = 2
	}
	size = min(size, maxSize)
	base := rng.NormFloat64()*300 + 1500
	home := rng.IntN(len(regions))
	party := make([]Member, size)
	for j := range party {
		rtt := make(map[string]float64, len(regions))
		for i, region := range regions {
			lo, hi := 0.5, 2.5
			if i == home {
				lo, hi = 0.1, 0.75
			}
			rtt[region] = math.Round(maxRTT[region] * (lo + (hi-lo)*rng.Float64()))
		}
		party[j] = Member{Rating: min(max(base+rng.NormFloat64()*100, MinRating), MaxRating), RTT: rtt}
	}
	return party
}
