package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/matchmaker"
	"ludus.dev/ludus/matchmaking"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/ratings"
)

func init() {
	var rate float64
	var duration, drain, ttl time.Duration
	var replicas int
	var kill bool
	registerBench("matchmaking", bench{
		summary: "matchmaker replicas on embedded etcd: tickets/s, time to match, parties split, tickets lost or matched twice (a replica killed mid-run)",
		flags: func(fs *flag.FlagSet) {
			fs.Float64Var(&rate, "rate", 5000, "ticket arrivals per second (Poisson; parties of 1-4 players)")
			fs.DurationVar(&duration, "duration", 10*time.Second, "how long tickets arrive")
			fs.DurationVar(&drain, "drain", 10*time.Second, "how long to wait after the arrivals for the last matches")
			fs.DurationVar(&ttl, "lease-ttl", 5*time.Second, "replica lease TTL (a dead leader's queue waits this long)")
			fs.IntVar(&replicas, "replicas", 3, "matchmaker replicas, each with its own etcd client")
			fs.BoolVar(&kill, "kill", true, "kill the leading replica (close its etcd client, no resignation) halfway")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			if !(rate > 0 && rate <= 50_000) || duration <= 0 || duration > time.Minute || drain < 0 || drain > time.Minute || replicas < 2 || replicas > 16 {
				return nil, errors.New("want 0 < -rate <= 50000, 0 < -duration <= 1m, 0 <= -drain <= 1m, 2 <= -replicas <= 16")
			}
			return benchMatchmaking(ctx, progress, rate, duration, drain, ttl, replicas, kill)
		},
	})
}

// mmBenchResult is the bench's JSON: field names are an interface.
type mmBenchResult struct {
	TicketsPerSec       float64 `json:"tickets_per_sec"`
	TimeToMatchMsP50    float64 `json:"time_to_match_ms_p50"`
	TimeToMatchMsP99    float64 `json:"time_to_match_ms_p99"`
	RatingSpreadP99     float64 `json:"rating_spread_p99"`
	PartiesSplit        int     `json:"parties_split"`
	TicketsLost         int     `json:"tickets_lost"`
	TicketsMatchedTwice int     `json:"tickets_matched_twice"`
	AllocateMsP50       float64 `json:"allocate_ms_p50"`
	AllocateMsP99       float64 `json:"allocate_ms_p99"`

	ArrivalsPerSec   float64 `json:"arrivals_per_sec"`
	Tickets          int     `json:"tickets"`
	Players          int     `json:"players"`
	Matched          int     `json:"tickets_matched"`
	TimedOut         int     `json:"tickets_timed_out"`
	StillSearching   int     `json:"tickets_still_searching"`
	Matches          int     `json:"matches"`
	AllocationsWaste int     `json:"allocations_unannounced"`
	Replicas         int     `json:"replicas"`
	ReplicaKilled    bool    `json:"replica_killed"`
	Seconds          float64 `json:"seconds"`
}

// mmRecorder is the bench's fake allocator: it records every seat.
type mmRecorder struct {
	mu    sync.Mutex
	n     int
	games map[string][][]matchmaker.Seat
}

func (r *mmRecorder) Allocate(_ context.Context, _, _, region string, seats [][]matchmaker.Seat) (matchmaker.Allocation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	id := "g" + strconv.Itoa(r.n)
	r.games[id] = seats
	return matchmaker.Allocation{GameID: id, NodeID: "bench", Region: region}, nil
}

// mmRatings serves the population's ratings.
type mmRatings struct{ m sync.Map }

func (r *mmRatings) Rating(_ context.Context, _, _, account string) (ratings.Rating, error) {
	v, ok := r.m.Load(account)
	if !ok {
		return ratings.New(), nil
	}
	rt := ratings.New()
	rt.Rating = v.(float64)
	return rt, nil
}

// mmTicket is one arriving party and what its players were told.
type mmTicket struct {
	arrived  time.Time
	accounts []string
	rating   float64

	mu      sync.Mutex
	found   map[string]*ludusv1.MatchFound
	other   map[string]string // account -> how its stream ended otherwise
	matched time.Time
}

func benchMatchmaking(ctx context.Context, progress io.Writer, rate float64, duration, drain, ttl time.Duration, nrep int, kill bool) (map[string]any, error) {
	dir, err := os.MkdirTemp("", "ludus-bench-mm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir, NoFsync: true})
	if err != nil {
		return nil, err
	}
	defer es.Close()

	const tenant, mode = "bench", "ranked"
	maxRTT := map[string]float64{"eu": 100, "us": 100}
	alloc := &mmRecorder{games: map[string][][]matchmaker.Seat{}}
	rs := &mmRatings{}
	var reps []*matchmaker.Matchmaker
	var clients []*clusterstate.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := range nrep {
		c, err := clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{es.Endpoint}})
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
		if i == 0 {
			rules := &ludusv1.MatchmakingRules{Mode: mode, TeamSize: 4, Teams: 2, BandStart: 100, BandStep: 50,
				BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: 45000, MaxRttMs: map[string]int32{"eu": 100, "us": 100}}
			admin, err := matchmaker.NewAdminService(c, func(context.Context, http.Header) (string, error) { return tenant, nil })
			if err != nil {
				return nil, err
			}
			if _, err := admin.SetRules(ctx, connect.NewRequest(&ludusv1.SetRulesRequest{Rules: rules})); err != nil {
				return nil, err
			}
		}
		m, err := matchmaker.New(matchmaker.Config{State: c, Allocator: alloc, Ratings: rs, LeaseTTL: ttl,
			ReplicaID: "bench-" + strconv.Itoa(i)})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		reps = append(reps, m)
		if i == 0 { // the first replica leads: the one killed halfway
			deadline := time.Now().Add(10 * time.Second)
			for !m.Leading(tenant, mode) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	fmt.Fprintf(progress, "matchmaking: %d replicas, %.0f arrivals/s for %v\n", nrep, rate, duration)

	rng := rand.New(rand.NewPCG(1, 2))
	regions := []string{"eu", "us"}
	var (
		tickets []*mmTicket
		wg      sync.WaitGroup
		players int
		seq     atomic.Int64
	)
	runCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	// Streams go to the replicas that stay up, so that a killed replica's
	// players (whose streams would break) do not count as lost tickets.
	serving := reps[1:]
	start := time.Now()
	next := start
	killed := false
	for time.Since(start) < duration && ctx.Err() == nil {
		if kill && !killed && time.Since(start) >= duration/2 {
			killed = true
			clients[0].Close()
			fmt.Fprintf(progress, "matchmaking: killed the leading replica at %v\n", time.Since(start).Round(time.Millisecond))
		}
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		party := matchmaking.SyntheticParty(rng, regions, maxRTT, matchmaking.MaxSeats)
		size := len(party)
		tk := &mmTicket{arrived: time.Now(), found: map[string]*ludusv1.MatchFound{}, other: map[string]string{}}
		reqs := make([]*ludusv1.FindMatchRequest, size)
		sum := 0.0
		for j, m := range party {
			acc := "p" + strconv.FormatInt(seq.Add(1), 36)
			sum += m.Rating
			rs.m.Store(acc, m.Rating)
			tk.accounts = append(tk.accounts, acc)
			rtt := make(map[string]int32, len(m.RTT))
			for region, ms := range m.RTT {
				rtt[region] = int32(ms)
			}
			reqs[j] = &ludusv1.FindMatchRequest{Mode: mode, RttMs: rtt}
		}
		tk.rating = sum / float64(size)
		players += size
		tickets = append(tickets, tk)
		pick := rng.IntN(len(serving))
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := ""
			if size > 1 {
				p, err := serving[pick].CreateParty(runCtx, matchmaker.Caller{TenantID: tenant, AccountID: tk.accounts[0]},
					&ludusv1.CreatePartyRequest{Mode: mode, Size: int32(size)})
				if err != nil {
					tk.mu.Lock()
					tk.other[tk.accounts[0]] = "create party: " + err.Error()
					tk.mu.Unlock()
					return
				}
				code = p.Code
			}
			var mwg sync.WaitGroup
			for j, acc := range tk.accounts {
				req := reqs[j]
				if code != "" {
					req.PartyCode, req.PartySize = code, int32(size)
				}
				rep := serving[(pick+j)%len(serving)]
				mwg.Add(1)
				go func() {
					defer mwg.Done()
					var last *ludusv1.FindMatchResponse
					err := rep.Find(runCtx, matchmaker.Caller{TenantID: tenant, AccountID: acc}, req, func(r *ludusv1.FindMatchResponse) error {
						last = r
						if r.GetFound() != nil {
							tk.mu.Lock()
							if tk.matched.IsZero() {
								tk.matched = time.Now()
							}
							tk.mu.Unlock()
						}
						return nil
					})
					tk.mu.Lock()
					defer tk.mu.Unlock()
					switch {
					case last.GetFound() != nil:
						tk.found[acc] = last.GetFound()
					case last.GetTimedOut() != nil:
						tk.other[acc] = "timed out"
					case err != nil:
						tk.other[acc] = "error: " + err.Error()
					default:
						tk.other[acc] = fmt.Sprintf("ended with %v", last)
					}
				}()
			}
			mwg.Wait()
		}()
	}
	arrivalSecs := time.Since(start).Seconds()
	// Drain: wait for the last matches, then end the streams still searching.
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		open := 0
		for _, tk := range tickets {
			tk.mu.Lock()
			if len(tk.found)+len(tk.other) < len(tk.accounts) {
				open++
			}
			tk.mu.Unlock()
		}
		if open < 8 { // fewer than a match's players can be left over
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	still, err := clients[1].CountTickets(ctx, tenant, mode)
	if err != nil {
		return nil, err
	}
	stopStreams()
	wg.Wait()
	elapsed := time.Since(start)

	res := mmBenchResult{ArrivalsPerSec: rate, Tickets: len(tickets), Players: players, Replicas: nrep, ReplicaKilled: killed,
		StillSearching: still, Seconds: elapsed.Seconds()}
	alloc.mu.Lock()
	games := alloc.games
	alloc.mu.Unlock()
	// Ground truth is the allocator's record: a game is announced when a
	// player was told of it; the other allocations were wasted (a ticket
	// left, or the leader died, between allocation and settlement).
	// How streams ended other than with a match, for the log.
	reasons := map[string]int{}
	for _, tk := range tickets {
		tk.mu.Lock()
		for _, why := range tk.other {
			if len(why) > 120 {
				why = why[:120]
			}
			reasons[why]++
		}
		tk.mu.Unlock()
	}
	for why, n := range reasons {
		if n >= len(tickets)/1000+1 {
			fmt.Fprintf(progress, "matchmaking: %d streams ended: %s\n", n, why)
		}
	}
	announced := map[string]bool{}
	for _, tk := range tickets {
		tk.mu.Lock()
		for _, f := range tk.found {
			announced[f.GameId] = true
		}
		tk.mu.Unlock()
	}
	seatedIn := map[string][]string{}       // account -> announced games it is seated in
	partyIn := map[string]map[string]bool{} // party code -> game/team it is seated in
	for id, seats := range games {
		if !announced[id] {
			res.AllocationsWaste++
			continue
		}
		for team, ss := range seats {
			for _, st := range ss {
				if st.Bot {
					continue
				}
				seatedIn[st.AccountID] = append(seatedIn[st.AccountID], id)
				if st.Party != "" {
					if partyIn[st.Party] == nil {
						partyIn[st.Party] = map[string]bool{}
					}
					partyIn[st.Party][id+"/"+strconv.Itoa(team)] = true
				}
			}
		}
	}
	for _, places := range partyIn {
		if len(places) > 1 {
			res.PartiesSplit++
		}
	}
	var waits []float64
	var spreads []float64
	inWindow := 0 // tickets matched while tickets were arriving
	matchRatings := map[string][]float64{}
	for _, tk := range tickets {
		tk.mu.Lock()
		twice := false
		for _, acc := range tk.accounts {
			if len(seatedIn[acc]) > 1 {
				twice = true
			}
			if f := tk.found[acc]; f != nil && !slices.Contains(seatedIn[acc], f.GameId) {
				twice = true // told of a game it is not seated in
			}
		}
		if twice {
			res.TicketsMatchedTwice++
		}
		switch {
		case len(seatedIn[tk.accounts[0]]) > 0:
			res.Matched++
			game := seatedIn[tk.accounts[0]][0]
			matchRatings[game] = append(matchRatings[game], tk.rating)
			if !tk.matched.IsZero() {
				waits = append(waits, float64(tk.matched.Sub(tk.arrived))/float64(time.Millisecond))
				if tk.matched.Sub(start).Seconds() <= arrivalSecs {
					inWindow++
				}
			}
		case anyTimedOut(tk.other):
			res.TimedOut++
		}
		tk.mu.Unlock()
	}
	// Lost: neither matched, timed out, nor among those still queued when
	// the bench ended the streams.
	res.TicketsLost = max(len(tickets)-res.Matched-res.TimedOut-still, 0)
	for _, rs := range matchRatings {
		spreads = append(spreads, slices.Max(rs)-slices.Min(rs))
	}
	res.Matches = len(announced)
	// The sustained rate: tickets matched while tickets were arriving, per
	// second of arrivals.
	res.TicketsPerSec = math.Round(float64(inWindow)/arrivalSecs*10) / 10
	res.TimeToMatchMsP50 = mmPct(waits, 0.5)
	res.TimeToMatchMsP99 = mmPct(waits, 0.99)
	res.RatingSpreadP99 = mmPct(spreads, 0.99)
	// Allocation latency as the leaders measured it: the median of the
	// replica that allocated most, the worst p99 of any.
	most := 0
	for _, m := range reps {
		p50, p99, n := m.AllocateLatency()
		if n > most {
			most, res.AllocateMsP50 = n, float64(p50.Microseconds())/1000
		}
		res.AllocateMsP99 = max(res.AllocateMsP99, float64(p99.Microseconds())/1000)
	}
	return structFields(res)
}

func anyTimedOut(other map[string]string) bool {
	for _, v := range other {
		if v == "timed out" {
			return true
		}
	}
	return false
}

func mmPct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return math.Round(xs[min(max(i, 0), len(xs)-1)]*10) / 10
}
