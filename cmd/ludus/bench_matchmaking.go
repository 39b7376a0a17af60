package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/internal/gcpolicy"
	"ludus.dev/ludus/matchmaker"
	"ludus.dev/ludus/matchmaking"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/ratings"
)

// mmFlags are the bench's flags.
type mmFlags struct {
	rate            float64
	duration, drain time.Duration
	ttl             time.Duration
	retention       time.Duration // etcd's compaction retention
	replicas        int
	maxParty        int // the largest party the synthetic population makes
	kill            bool
	saturate        bool
	satFrom, satMax float64
	satStep         time.Duration
	satVerify       time.Duration
	cpuprofile      string
	memprofile      string
}

func init() {
	var f mmFlags
	registerBench("matchmaking", bench{
		summary: "matchmaker replicas on embedded etcd: tickets/s (highest sustained rate), time to match, parties split, tickets lost or matched twice (a replica killed mid-run)",
		flags: func(fs *flag.FlagSet) {
			fs.Float64Var(&f.rate, "rate", 200, "ticket arrivals per second of the first phase, the one with the kill (Poisson; parties of 1 to -max-party players)")
			fs.DurationVar(&f.duration, "duration", 10*time.Second, "how long tickets arrive in the first phase")
			fs.DurationVar(&f.drain, "drain", 10*time.Second, "how long to wait after the arrivals of a phase for the last matches (a saturation run waits at least the max wait, 45 s, and 10 s more)")
			fs.DurationVar(&f.ttl, "lease-ttl", 5*time.Second, "replica lease TTL (a dead leader's queue waits this long)")
			fs.DurationVar(&f.retention, "etcd-compaction-retention", etcdserver.DefaultCompactionRetention, "how long the embedded etcd keeps replaced revisions (its periodic compaction)")
			fs.IntVar(&f.replicas, "replicas", 3, "matchmaker replicas, each with its own etcd client")
			fs.IntVar(&f.maxParty, "max-party", mmMaxParty, "largest party of the synthetic population (1-4): a party it would make larger is made this large; 1 queues every player alone")
			fs.BoolVar(&f.kill, "kill", true, "kill the leading replica (close its etcd client, no resignation) halfway through the first phase")
			fs.BoolVar(&f.saturate, "saturate", true, "run the saturation phase (fresh etcd and replicas, no kill) that measures tickets_per_sec; false leaves it 0")
			fs.Float64Var(&f.satFrom, "saturate-from", 400, "first arrival rate of the saturation ramp (tickets/s); each step is 1.25 times the last")
			fs.Float64Var(&f.satMax, "saturate-max", 20_000, "highest arrival rate the ramp tries")
			fs.DurationVar(&f.satStep, "saturate-step", 2*time.Second, "how long each ramp step lasts")
			fs.DurationVar(&f.satVerify, "saturate-verify", 30*time.Second, "how long each steady run that confirms a rate lasts, on a fresh etcd and replicas (a quarter of it warms up)")
			fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole process (etcd included) to this file")
			fs.StringVar(&f.memprofile, "memprofile", "", "write an allocation profile of the whole process (etcd included) to this file at the end")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			if !(f.rate > 0 && f.rate <= 50_000) || f.duration <= 0 || f.duration > time.Minute || f.drain < 0 || f.drain > time.Minute ||
				f.replicas < 2 || f.replicas > 16 {
				return nil, errors.New("want 0 < -rate <= 50000, 0 < -duration <= 1m, 0 <= -drain <= 1m, 2 <= -replicas <= 16")
			}
			if f.saturate && (!(f.satFrom > 0 && f.satFrom <= f.satMax && f.satMax <= 50_000) ||
				f.satStep < 500*time.Millisecond || f.satStep > 10*time.Second || f.satVerify < 2*time.Second || f.satVerify > time.Minute) {
				return nil, errors.New("want 0 < -saturate-from <= -saturate-max <= 50000, 500ms <= -saturate-step <= 10s, 2s <= -saturate-verify <= 1m")
			}
			if f.retention < time.Second || f.retention > 24*time.Hour {
				return nil, errors.New("want 1s <= -etcd-compaction-retention <= 24h")
			}
			if f.maxParty < 1 || f.maxParty > mmMaxParty {
				return nil, fmt.Errorf("want 1 <= -max-party <= %d (the population's parties are of 1 to %d players)", mmMaxParty, mmMaxParty)
			}
			if f.cpuprofile != "" {
				out, err := os.Create(f.cpuprofile)
				if err != nil {
					return nil, err
				}
				defer out.Close()
				if err := pprof.StartCPUProfile(out); err != nil {
					return nil, err
				}
				defer pprof.StopCPUProfile()
			}
			res, err := benchMatchmaking(ctx, progress, f)
			if err == nil && f.memprofile != "" {
				err = writeAllocProfile(f.memprofile)
			}
			return res, err
		},
	})
}

// writeAllocProfile writes the allocations made since the process started
// (sampled, as runtime.MemProfileRate says): what garbage collection pays for.
func writeAllocProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// mmBenchResult is the bench's JSON: field names are an interface.
type mmBenchResult struct {
	// TicketsPerSec is the highest sustained rate, from the saturation
	// phase: tickets that arrived during its steady window and were matched
	// within mmSustainWait, per second of that window.
	TicketsPerSec       float64 `json:"tickets_per_sec"`
	TimeToMatchMsP50    float64 `json:"time_to_match_ms_p50"`
	TimeToMatchMsP99    float64 `json:"time_to_match_ms_p99"`
	RatingSpreadP99     float64 `json:"rating_spread_p99"`
	PartiesSplit        int     `json:"parties_split"`
	TicketsLost         int     `json:"tickets_lost"`
	TicketsMatchedTwice int     `json:"tickets_matched_twice"`
	AllocateMsP50       float64 `json:"allocate_ms_p50"`
	AllocateMsP99       float64 `json:"allocate_ms_p99"`

	// The first phase (-rate, with the kill): the rate tickets were matched
	// while they arrived, which cannot exceed the arrival rate.
	TicketsPerSecAtArrivalRate float64 `json:"tickets_per_sec_at_arrival_rate"`
	ArrivalsPerSec             float64 `json:"arrivals_per_sec"`
	Tickets                    int     `json:"tickets"`
	Players                    int     `json:"players"`
	Matched                    int     `json:"tickets_matched"`
	TimedOut                   int     `json:"tickets_timed_out"`
	// Refused: tickets turned away at once (matchmaker.ErrOverloaded,
	// Unavailable: search again) because etcd was not keeping up; both
	// phases. They are not lost: the players were told.
	Refused          int `json:"tickets_refused"`
	StillSearching   int `json:"tickets_still_searching"`
	Matches          int `json:"matches"`
	AllocationsWaste int `json:"allocations_unannounced"`
	Replicas         int `json:"replicas"`
	// The collector's settings the process ran with (internal/gcpolicy:
	// those of a gateway and an etcd server, unless GOGC or GOMEMLIMIT say
	// otherwise).
	GCPercent        int     `json:"gc_percent"`
	MemoryLimitBytes int64   `json:"memory_limit_bytes"`
	ReplicaKilled    bool    `json:"replica_killed"`
	Seconds          float64 `json:"seconds"`

	// The saturation phase.
	SaturationArrivalsPerSec float64 `json:"saturation_arrivals_per_sec"`
	SaturationTickets        int     `json:"saturation_tickets"`
	SaturationMsP50          float64 `json:"saturation_time_to_match_ms_p50"`
	SaturationMsP99          float64 `json:"saturation_time_to_match_ms_p99"`
	SaturationSeconds        float64 `json:"saturation_seconds"`
	// CPU time of the whole process (etcd, replicas and the bench's own
	// players) over the saturation phase, per ticket: what the figures
	// above cost, whatever else ran on the machine.
	SaturationCPUMsPerTicket float64 `json:"saturation_cpu_ms_per_ticket"`
	// The same CPU time per player of those tickets (a party of k is k
	// players), and how many players that was: what a ticket costs grows
	// with its players, so this compares populations of other party sizes
	// (-max-party).
	SaturationPlayers        int     `json:"saturation_players"`
	SaturationCPUMsPerPlayer float64 `json:"saturation_cpu_ms_per_player"`
	// MaxParty is -max-party: the largest party of the population.
	MaxParty int `json:"max_party"`

	// etcd's own counters over both phases, per ticket: unary requests
	// (Range, Txn, Put, LeaseGrant, ...), applied writes (raft proposals)
	// and watch events sent.
	EtcdRequestsPerTicket    float64 `json:"etcd_requests_per_ticket"`
	EtcdWritesPerTicket      float64 `json:"etcd_writes_per_ticket"`
	EtcdWatchEventsPerTicket float64 `json:"etcd_watch_events_per_ticket"`

	// The etcd database of the saturation phase's ramp (its longest run on
	// one etcd) at the ramp's end: the file's size and the part of it in
	// use. What compaction (ops/etcdserver) frees is reused, so these grow
	// with the revisions etcd still keeps.
	SaturationEtcdDBBytes      float64 `json:"saturation_etcd_db_bytes"`
	SaturationEtcdDBInUseBytes float64 `json:"saturation_etcd_db_in_use_bytes"`
}

const (
	mmTenant, mmMode = "bench", "ranked"
	// mmMaxParty is the largest party matchmaking.SyntheticParty makes
	// (the bench's teams are as large, so every party fits one).
	mmMaxParty = 4
	// mmSustainWait: a ticket of the saturation phase counts only if it was
	// matched within this long of arriving.
	mmSustainWait = 5 * time.Second
)

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

	// The maps are made on first write, and found keeps the game id alone:
	// a run records a few hundred thousand tickets, and this process's
	// collector marks them all along with etcd and the replicas it measures
	// (the whole MatchFound of every player and two maps made up front
	// were about 300,000 of the 5.3 million live objects at the end of a
	// window at 3,725 arrivals/s).
	mu      sync.Mutex
	found   map[string]string // account -> the game id its stream was told
	other   map[string]string // account -> how its stream ended otherwise
	matched time.Time         // when the first player was told of a match
	done    bool              // matched, refused, or every stream ended
	refused bool              // a player was refused: matchmaking was overloaded (ErrOverloaded)
}

// finish marks the ticket as no longer searching, once; tk.mu is held.
func (tk *mmTicket) finish(l *mmLoad) {
	if !tk.done {
		tk.done = true
		l.open.Add(-1)
	}
}

// setOther records how acc's stream ended other than with a match; tk.mu
// is held.
func (tk *mmTicket) setOther(acc, why string) {
	if tk.other == nil {
		tk.other = map[string]string{}
	}
	tk.other[acc] = why
}

// mmRig is one embedded etcd and its matchmaker replicas.
type mmRig struct {
	dir     string
	es      *etcdserver.Server
	clients []*clusterstate.Client
	reps    []*matchmaker.Matchmaker
	alloc   *mmRecorder
	rs      *mmRatings
	etcd0   etcdCounters
	closed  sync.Once
}

// startMMRig starts etcd and nrep replicas; the first leads the queue.
func startMMRig(ctx context.Context, nrep int, ttl, retention time.Duration) (_ *mmRig, err error) {
	r := &mmRig{alloc: &mmRecorder{games: map[string][][]matchmaker.Seat{}}, rs: &mmRatings{}}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.dir, err = os.MkdirTemp("", "ludus-bench-mm"); err != nil {
		return nil, err
	}
	if r.es, err = etcdserver.Start(ctx, etcdserver.Config{Dir: r.dir, NoFsync: true, CompactionRetention: retention}); err != nil {
		return nil, err
	}
	for i := range nrep {
		c, err := clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{r.es.Endpoint}})
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
		if i == 0 {
			rules := &ludusv1.MatchmakingRules{Mode: mmMode, TeamSize: 4, Teams: 2, BandStart: 100, BandStep: 50,
				BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: mmMaxWait.Milliseconds(), MaxRttMs: map[string]int32{"eu": 100, "us": 100}}
			admin, err := matchmaker.NewAdminService(c, func(context.Context, http.Header) (string, error) { return mmTenant, nil })
			if err != nil {
				return nil, err
			}
			if _, err := admin.SetRules(ctx, connect.NewRequest(&ludusv1.SetRulesRequest{Rules: rules})); err != nil {
				return nil, err
			}
		}
		m, err := matchmaker.New(matchmaker.Config{State: c, Allocator: r.alloc, Ratings: r.rs, LeaseTTL: ttl,
			ReplicaID: "bench-" + strconv.Itoa(i)})
		if err != nil {
			return nil, err
		}
		r.reps = append(r.reps, m)
		if i == 0 { // the first replica leads: the one killed halfway
			deadline := time.Now().Add(10 * time.Second)
			for !m.Leading(mmTenant, mmMode) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	r.etcd0, _ = readEtcdCounters(ctx, r.es.Endpoint)
	return r, nil
}

// Close stops the replicas, their clients and etcd; once.
func (r *mmRig) Close() { r.closed.Do(r.close) }

func (r *mmRig) close() {
	for _, m := range r.reps {
		m.Close()
	}
	for _, c := range r.clients {
		c.Close()
	}
	if r.es != nil {
		r.es.Close()
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// mmLoad generates tickets against some replicas and records what their
// players are told.
type mmLoad struct {
	rig     *mmRig
	serving []*matchmaker.Matchmaker
	ctx     context.Context // ends the streams
	rng     *rand.Rand
	regions []string
	maxRTT  map[string]float64
	// maxParty caps the parties' sizes (-max-party).
	maxParty int
	seq      int
	next     time.Time // the next arrival

	mu      sync.Mutex
	tickets []*mmTicket
	players int
	failed  int // streams that ended with an error while the bench kept them open
	wg      sync.WaitGroup
	open    atomic.Int64 // tickets still searching
}

func newMMLoad(ctx context.Context, rig *mmRig, serving []*matchmaker.Matchmaker, seed uint64, maxParty int) *mmLoad {
	return &mmLoad{rig: rig, serving: serving, ctx: ctx, rng: rand.New(rand.NewPCG(seed, 2)),
		regions: []string{"eu", "us"}, maxRTT: map[string]float64{"eu": 100, "us": 100}, maxParty: maxParty, next: time.Now()}
}

// party draws the next ticket's players: matchmaking.SyntheticParty's
// parties of 1-4, none larger than l.maxParty.
func (l *mmLoad) party() []matchmaking.Member {
	return matchmaking.SyntheticParty(l.rng, l.regions, l.maxRTT, l.maxParty)
}

// arrivals queues tickets at rate (Poisson) for d, or until ctx ends.
func (l *mmLoad) arrivals(ctx context.Context, rate float64, d time.Duration) {
	end := time.Now().Add(d)
	if l.next.Before(time.Now().Add(-time.Second)) {
		l.next = time.Now() // after a pause: no burst to catch up
	}
	for ctx.Err() == nil {
		l.next = l.next.Add(time.Duration(l.rng.ExpFloat64() / rate * float64(time.Second)))
		if !l.next.Before(end) {
			if d := time.Until(end); d > 0 {
				time.Sleep(d)
			}
			return
		}
		if d := time.Until(l.next); d > 0 {
			time.Sleep(d)
		}
		l.arrive()
	}
}

// arrive queues one ticket (a party of 1 to l.maxParty players) now.
func (l *mmLoad) arrive() {
	party := l.party()
	size := len(party)
	tk := &mmTicket{arrived: time.Now()}
	reqs := make([]*ludusv1.FindMatchRequest, size)
	sum := 0.0
	for j, m := range party {
		l.seq++
		acc := "p" + strconv.FormatInt(int64(l.seq), 36)
		sum += m.Rating
		l.rig.rs.m.Store(acc, m.Rating)
		tk.accounts = append(tk.accounts, acc)
		rtt := make(map[string]int32, len(m.RTT))
		for region, ms := range m.RTT {
			rtt[region] = int32(ms)
		}
		reqs[j] = &ludusv1.FindMatchRequest{Mode: mmMode, RttMs: rtt}
	}
	tk.rating = sum / float64(size)
	l.mu.Lock()
	l.players += size
	l.tickets = append(l.tickets, tk)
	l.mu.Unlock()
	l.open.Add(1)
	pick := l.rng.IntN(len(l.serving))
	// The ticket's own context: a refused party ends its members' streams.
	ctx, cancel := context.WithCancel(l.ctx)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer cancel()
		defer func() {
			tk.mu.Lock()
			tk.finish(l)
			tk.mu.Unlock()
		}()
		// failed records a stream or party that failed while the bench kept
		// it open; a refused ticket (ErrOverloaded) ends at once.
		failed := func(acc, what string, err error) {
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			l.failed++
			l.mu.Unlock()
			tk.mu.Lock()
			tk.setOther(acc, what+err.Error())
			if errors.Is(err, matchmaker.ErrOverloaded) {
				tk.refused = true
				tk.finish(l)
			}
			tk.mu.Unlock()
			if errors.Is(err, matchmaker.ErrOverloaded) {
				cancel()
			}
		}
		code := ""
		if size > 1 {
			p, err := l.serving[pick].CreateParty(ctx, matchmaker.Caller{TenantID: mmTenant, AccountID: tk.accounts[0]},
				&ludusv1.CreatePartyRequest{Mode: mmMode, Size: int32(size)})
			if err != nil {
				failed(tk.accounts[0], "create party: ", err)
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
			rep := l.serving[(pick+j)%len(l.serving)]
			mwg.Add(1)
			go func() {
				defer mwg.Done()
				var last *ludusv1.FindMatchResponse
				err := rep.Find(ctx, matchmaker.Caller{TenantID: mmTenant, AccountID: acc}, req, func(r *ludusv1.FindMatchResponse) error {
					last = r
					if r.GetFound() != nil {
						tk.mu.Lock()
						if tk.matched.IsZero() {
							tk.matched = time.Now()
						}
						tk.finish(l)
						tk.mu.Unlock()
					}
					return nil
				})
				if err != nil {
					failed(acc, "error: ", err)
				}
				tk.mu.Lock()
				defer tk.mu.Unlock()
				switch {
				case last.GetFound() != nil:
					if tk.found == nil {
						tk.found = make(map[string]string, len(tk.accounts))
					}
					tk.found[acc] = last.GetFound().GameId
				case last.GetTimedOut() != nil:
					tk.setOther(acc, "timed out")
				case err != nil:
					if tk.other[acc] == "" {
						tk.setOther(acc, "error: "+err.Error())
					}
				default:
					tk.setOther(acc, fmt.Sprintf("ended with %v", last))
				}
			}()
		}
		mwg.Wait()
	}()
}

// snapshot returns the tickets so far.
func (l *mmLoad) snapshot() []*mmTicket {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tickets)
}

// failures counts the streams that failed while the bench kept them open.
func (l *mmLoad) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// backlog counts the tickets that arrived and still search now.
func (l *mmLoad) backlog() int { return int(l.open.Load()) }

// meanBacklog queues tickets at rate for d, sampling the backlog every
// 50 ms, and returns its mean: the queue is emptied in steps (a leader's
// scan every 250 ms), so one sample says little.
func (l *mmLoad) meanBacklog(ctx context.Context, rate float64, d time.Duration) float64 {
	var sum, n atomic.Int64
	sctx, stop := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				sum.Add(int64(l.backlog()))
				n.Add(1)
			}
		}
	}()
	l.arrivals(ctx, rate, d)
	stop()
	return float64(sum.Load()) / float64(max(n.Load(), 1))
}

// drain waits up to d for the streams to end (all but fewer than a match's
// players, who cannot make a match), then reads how many tickets are still
// queued and, resultGrace later, ends their streams.
func (l *mmLoad) drain(ctx context.Context, d time.Duration, stop context.CancelFunc) (still int, err error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if l.backlog() < 8 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Any replica that stayed up can count (the first may have been killed).
	still, err = l.rig.clients[len(l.rig.clients)-1].CountTickets(ctx, mmTenant, mmMode)
	// A match settled just before the count has left etcd while its results
	// are still on their way to the streams: ended now, its tickets would be
	// neither matched nor still searching, and counted lost (10 of 44 open
	// tickets in a small run under -race on a loaded machine). A ticket
	// matched during the grace is counted twice, which can hide a loss but
	// never make one up.
	select {
	case <-time.After(resultGrace):
	case <-ctx.Done():
	}
	stop()
	l.wg.Wait()
	return still, err
}

// mmMaxWait is the bench mode's max wait: a ticket not matched by then
// times out.
const mmMaxWait = 45 * time.Second

// mmSaturationDrain is the least a saturation run drains for. A run past
// the rate etcd keeps up with ends with thousands of tickets in flight:
// written and waiting, or still starting and not yet in etcd. Ended by
// the default 10 s drain, those still starting were counted lost (5,601
// "lost" in one default run on a 2-core machine; none with a longer
// drain). Every ticket reaches an outcome within the max wait: matched,
// timed out, or refused. A run that keeps up drains in moments.
const mmSaturationDrain = mmMaxWait + 10*time.Second

// resultGrace is how long drain lets results already written reach their
// streams before it ends them.
const resultGrace = 2 * time.Second

// conclude ends a run: it drains the load (drain, at most d), logs how its
// streams ended otherwise than matched, and tallies its tickets against
// the rig's allocator.
func (l *mmLoad) conclude(ctx context.Context, progress io.Writer, phase string, d time.Duration, stop context.CancelFunc) (tickets []*mmTicket, still int, t mmTally, err error) {
	if still, err = l.drain(ctx, d, stop); err != nil {
		return nil, 0, t, err
	}
	tickets = l.snapshot()
	logReasons(progress, phase, tickets)
	l.rig.alloc.mu.Lock()
	t = tally(tickets, l.rig.alloc.games, still)
	l.rig.alloc.mu.Unlock()
	return tickets, still, t, nil
}

// mmTally is what a phase's tickets and the allocator's record say.
type mmTally struct {
	matched, timedOut, refused, lost, split, twice, matches, waste int
	waits, spreads                                                 []float64
}

// add adds b's counts and samples to t's.
func (t *mmTally) add(b mmTally) {
	t.matched += b.matched
	t.timedOut += b.timedOut
	t.refused += b.refused
	t.lost += b.lost
	t.split += b.split
	t.twice += b.twice
	t.matches += b.matches
	t.waste += b.waste
	t.waits = append(t.waits, b.waits...)
	t.spreads = append(t.spreads, b.spreads...)
}

// tally checks a phase's tickets against the allocator's record, the ground
// truth: a game is announced when a player was told of it; the other
// allocations were wasted (a ticket left, or the leader died, between
// allocation and settlement).
func tally(tickets []*mmTicket, games map[string][][]matchmaker.Seat, still int) mmTally {
	var t mmTally
	announced := map[string]bool{}
	for _, tk := range tickets {
		tk.mu.Lock()
		for _, game := range tk.found {
			announced[game] = true
		}
		tk.mu.Unlock()
	}
	seatedIn := map[string][]string{}       // account -> announced games it is seated in
	partyIn := map[string]map[string]bool{} // party code -> game/team it is seated in
	for id, seats := range games {
		if !announced[id] {
			t.waste++
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
			t.split++
		}
	}
	matchRatings := map[string][]float64{}
	for _, tk := range tickets {
		tk.mu.Lock()
		twice := false
		for _, acc := range tk.accounts {
			if len(seatedIn[acc]) > 1 {
				twice = true
			}
			if game, ok := tk.found[acc]; ok && !slices.Contains(seatedIn[acc], game) {
				twice = true // told of a game it is not seated in
			}
		}
		if twice {
			t.twice++
		}
		switch {
		case len(seatedIn[tk.accounts[0]]) > 0:
			t.matched++
			game := seatedIn[tk.accounts[0]][0]
			matchRatings[game] = append(matchRatings[game], tk.rating)
			if !tk.matched.IsZero() {
				t.waits = append(t.waits, float64(tk.matched.Sub(tk.arrived))/float64(time.Millisecond))
			}
		case anyTimedOut(tk.other):
			t.timedOut++
		case tk.refused:
			t.refused++
		}
		tk.mu.Unlock()
	}
	// Lost: neither matched, timed out, refused at the door (told to search
	// again), nor among those still queued when the bench ended the streams.
	t.lost = max(len(tickets)-t.matched-t.timedOut-t.refused-still, 0)
	for _, rs := range matchRatings {
		t.spreads = append(t.spreads, slices.Max(rs)-slices.Min(rs))
	}
	t.matches = len(announced)
	return t
}

// logReasons logs how streams ended other than with a match.
func logReasons(progress io.Writer, phase string, tickets []*mmTicket) {
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
			fmt.Fprintf(progress, "matchmaking %s: %d streams ended: %s\n", phase, n, why)
		}
	}
}

func benchMatchmaking(ctx context.Context, progress io.Writer, f mmFlags) (map[string]any, error) {
	// The process stands in for gateways and etcd, and runs as they do.
	gc := gcpolicy.ForServer(slog.New(slog.NewTextHandler(progress, nil)))
	res := mmBenchResult{ArrivalsPerSec: f.rate, Replicas: f.replicas, MaxParty: f.maxParty, GCPercent: gc.GCPercent, MemoryLimitBytes: gc.MemoryLimit}
	var etcd etcdCounters
	var nTickets int

	// Phase 1: arrivals at -rate, the leading replica killed halfway.
	rig, err := startMMRig(ctx, f.replicas, f.ttl, f.retention)
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	fmt.Fprintf(progress, "matchmaking: %d replicas, %.0f arrivals/s for %v\n", f.replicas, f.rate, f.duration)
	runCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	// Streams go to the replicas that stay up, so that a killed replica's
	// players (whose streams would break) do not count as lost tickets.
	load := newMMLoad(runCtx, rig, rig.reps[1:], 1, f.maxParty)
	start := time.Now()
	if f.kill {
		load.arrivals(ctx, f.rate, f.duration/2)
		rig.clients[0].Close()
		res.ReplicaKilled = true
		fmt.Fprintf(progress, "matchmaking: killed the leading replica at %v\n", time.Since(start).Round(time.Millisecond))
		load.arrivals(ctx, f.rate, f.duration-f.duration/2)
	} else {
		load.arrivals(ctx, f.rate, f.duration)
	}
	arrivalEnd := time.Now()
	tickets, still, t, err := load.conclude(ctx, progress, "phase 1", f.drain, stopStreams)
	if err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Tickets, res.Players, res.StillSearching = len(tickets), load.players, still
	res.Matched, res.TimedOut, res.Matches, res.AllocationsWaste = t.matched, t.timedOut, t.matches, t.waste
	res.Refused = t.refused
	res.PartiesSplit, res.TicketsLost, res.TicketsMatchedTwice = t.split, t.lost, t.twice
	res.TimeToMatchMsP50 = mmPct(t.waits, 0.5)
	res.TimeToMatchMsP99 = mmPct(t.waits, 0.99)
	res.RatingSpreadP99 = mmPct(t.spreads, 0.99)
	// Tickets matched while tickets were arriving, per second of arrivals.
	inWindow := 0
	for _, tk := range tickets {
		tk.mu.Lock()
		if !tk.matched.IsZero() && !tk.matched.After(arrivalEnd) {
			inWindow++
		}
		tk.mu.Unlock()
	}
	res.TicketsPerSecAtArrivalRate = math.Round(float64(inWindow)/arrivalEnd.Sub(start).Seconds()*10) / 10
	// Allocation latency as the leaders measured it: the median of the
	// replica that allocated most, the worst p99 of any.
	most := 0
	for _, m := range rig.reps {
		p50, p99, n := m.AllocateLatency()
		if n > most {
			most, res.AllocateMsP50 = n, float64(p50.Microseconds())/1000
		}
		res.AllocateMsP99 = max(res.AllocateMsP99, float64(p99.Microseconds())/1000)
	}
	if c, err := readEtcdCounters(ctx, rig.es.Endpoint); err == nil {
		etcd = etcd.add(c.sub(rig.etcd0))
		nTickets += len(tickets)
	}
	rig.Close()

	if f.saturate {
		sat, err := saturate(ctx, progress, f)
		if err != nil {
			return nil, err
		}
		res.TicketsPerSec = sat.ticketsPerSec
		res.SaturationArrivalsPerSec = sat.rate
		res.SaturationTickets = sat.tickets
		res.SaturationMsP50, res.SaturationMsP99 = sat.p50, sat.p99
		res.SaturationSeconds = sat.seconds
		res.SaturationCPUMsPerTicket = sat.cpuMsPerTicket
		res.SaturationPlayers, res.SaturationCPUMsPerPlayer = sat.players, sat.cpuMsPerPlayer
		res.SaturationEtcdDBBytes, res.SaturationEtcdDBInUseBytes = sat.etcd.dbBytes, sat.etcd.dbInUseBytes
		// The correctness figures cover both phases.
		res.PartiesSplit += sat.t.split
		res.TicketsLost += sat.t.lost
		res.TicketsMatchedTwice += sat.t.twice
		res.Refused += sat.t.refused
		if sat.etcdOK {
			etcd = etcd.add(sat.etcd)
			nTickets += sat.tickets
		}
	}
	if nTickets > 0 {
		per := func(x float64) float64 { return math.Round(x/float64(nTickets)*100) / 100 }
		res.EtcdRequestsPerTicket = per(etcd.requests)
		res.EtcdWritesPerTicket = per(etcd.writes)
		res.EtcdWatchEventsPerTicket = per(etcd.events)
	}
	return structFields(res)
}

// mmSaturation is what the saturation phase measured.
type mmSaturation struct {
	ticketsPerSec, rate float64
	tickets, players    int
	p50, p99, seconds   float64
	cpuMsPerTicket      float64
	cpuMsPerPlayer      float64
	t                   mmTally
	etcd                etcdCounters
	etcdOK              bool
}

// saturate finds the highest arrival rate the replicas sustain, with no
// kill. A ramp (each step 1.25 times the last, -saturate-step long) on a
// fresh etcd proposes a rate: the last step whose mean backlog over its
// second half stayed within what 0.75 s of its arrivals would leave queued
// (Little's law: a mean wait of 0.75 s), with no stream failing. Steady
// runs (verifyRate, -saturate-verify long) then decide, going up from the
// proposed rate (1.25 times) while they pass and down while they fail, and
// once more halfway (geometrically) between the highest rate that passed
// and the lowest above it that failed. Each steady run has an etcd and
// replicas of its own, fresh: a run that failed leaves thousands of tickets
// searching (parties waiting for their bands to widen) and their revisions
// in etcd, which would count against the next run rather than its own
// rate. tickets_per_sec is the best passing window's tickets matched within
// mmSustainWait, per second of the window: it cannot exceed the rate they
// arrived at. Every run's tickets are tallied against its own allocator.
func saturate(ctx context.Context, progress io.Writer, f mmFlags) (mmSaturation, error) {
	var out mmSaturation
	start, cpu0 := time.Now(), cpuTime()
	out.etcdOK = true
	// run runs fn against a fresh rig, then drains and tallies its tickets;
	// it returns etcd's counters at the end (ok false if unread).
	run := func(seed uint64, fn func(load *mmLoad)) (etcdAtEnd etcdCounters, ok bool, err error) {
		rig, err := startMMRig(ctx, f.replicas, f.ttl, f.retention)
		if err != nil {
			return etcdAtEnd, false, err
		}
		defer rig.Close()
		runCtx, stopStreams := context.WithCancel(ctx)
		defer stopStreams()
		load := newMMLoad(runCtx, rig, rig.reps, seed, f.maxParty)
		fn(load)
		tickets, _, t, err := load.conclude(ctx, progress, "saturation", max(f.drain, mmSaturationDrain), stopStreams)
		if err != nil {
			return etcdAtEnd, false, err
		}
		out.tickets += len(tickets)
		load.mu.Lock()
		out.players += load.players
		load.mu.Unlock()
		out.t.add(t)
		etcdAtEnd, err = readEtcdCounters(ctx, rig.es.Endpoint)
		if err != nil {
			out.etcdOK = false
			return etcdAtEnd, false, nil
		}
		out.etcd = out.etcd.add(etcdAtEnd.sub(rig.etcd0))
		return etcdAtEnd, true, nil
	}

	rate, proposed := f.satFrom, 0.0
	rampEtcd, rampOK, err := run(2, func(load *mmLoad) {
		for rate <= f.satMax && ctx.Err() == nil {
			failed := load.failures()
			load.arrivals(ctx, rate, f.satStep/2)
			b := load.meanBacklog(ctx, rate, f.satStep-f.satStep/2)
			fmt.Fprintf(progress, "matchmaking saturation: %.0f arrivals/s, %.0f tickets searching (mean)\n", rate, b)
			if b > max(0.75*rate, 300) || load.failures() > failed {
				break
			}
			proposed = rate
			rate *= 1.25
		}
	})
	if err != nil {
		return out, err
	}
	if rampOK { // the ramp's database: the longest run on one etcd
		out.etcd.dbBytes, out.etcd.dbInUseBytes = rampEtcd.dbBytes, rampEtcd.dbInUseBytes
	}
	verify := func(rate float64) (bool, error) {
		var ok bool
		_, _, err := run(3, func(load *mmLoad) {
			var tps, p50, p99 float64
			ok, tps, p50, p99 = verifyRate(ctx, progress, load, rate, f.satVerify)
			if ok && tps > out.ticketsPerSec {
				out.rate, out.ticketsPerSec, out.p50, out.p99 = math.Round(rate), tps, p50, p99
			}
		})
		return ok, err
	}
	rate = max(proposed, f.satFrom)
	passed, failedAt := 0.0, 0.0
search:
	for tries := 0; tries < 6 && ctx.Err() == nil; tries++ {
		ok, err := verify(rate)
		if err != nil {
			return out, err
		}
		if ok {
			passed = max(passed, rate)
		} else if failedAt == 0 || rate < failedAt {
			failedAt = rate
		}
		switch {
		case ok && failedAt == 0 && rate*1.25 <= f.satMax:
			rate *= 1.25 // passed, and nothing above failed yet: try higher
		case !ok && passed == 0 && rate/1.25 >= f.satFrom/2:
			rate /= 1.25 // failed, and nothing passed yet: try lower
		default:
			break search
		}
	}
	// The steps of 1.25 hide up to a fifth of the rate: try once between
	// the highest that passed and the lowest above it that failed.
	if mid := math.Sqrt(passed * failedAt); passed > 0 && failedAt > passed*1.1 && ctx.Err() == nil {
		if _, err := verify(mid); err != nil {
			return out, err
		}
	}
	out.seconds = time.Since(start).Seconds()
	cpuMs := float64(cpuTime()-cpu0) / float64(time.Millisecond)
	if out.tickets > 0 {
		out.cpuMsPerTicket = math.Round(cpuMs/float64(out.tickets)*1000) / 1000
	}
	if out.players > 0 {
		out.cpuMsPerPlayer = math.Round(cpuMs/float64(out.players)*1000) / 1000
	}
	return out, nil
}

// verifyRate runs tickets at rate for d (the first quarter to warm up)
// and reports whether the rate was sustained, and the window's tickets
// matched within mmSustainWait per second with their times to match.
// Sustained: 95% of the window's tickets matched within mmSustainWait, the
// median time to match of the window's second half no more than 500 ms
// (two of a leader's scans) above the first half's (a queue falling behind
// makes each ticket wait longer than the one before: at 10% more arrivals
// than matches, 300 ms more over the 3 s between the halves' middles), and
// no stream failed.
func verifyRate(ctx context.Context, progress io.Writer, load *mmLoad, rate float64, d time.Duration) (ok bool, tps, p50, p99 float64) {
	// Let the backlog drain first (the oldest tickets are matched first,
	// so a backlog would hold up the window's tickets), or stop shrinking:
	// some parties wait for their bands to widen.
	for prev, still := load.backlog(), 0; still < 20 && load.backlog() > int(max(rate/4, 100)) && ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		if b := load.backlog(); b < prev {
			prev, still = b, 0
		} else {
			still++
		}
	}
	failed := load.failures()
	load.arrivals(ctx, rate, d/4)
	w0 := time.Now()
	load.arrivals(ctx, rate, d-d/4)
	w1 := time.Now()
	mid := w0.Add(w1.Sub(w0) / 2)
	// Every ticket of the window gets mmSustainWait, under the same load.
	load.arrivals(ctx, rate, mmSustainWait)
	var arrived, matched int
	var waits, first, second []float64
	for _, tk := range load.snapshot() {
		if tk.arrived.Before(w0) || !tk.arrived.Before(w1) {
			continue
		}
		arrived++
		tk.mu.Lock()
		m := tk.matched
		tk.mu.Unlock()
		if m.IsZero() || m.Sub(tk.arrived) > mmSustainWait {
			continue
		}
		matched++
		w := float64(m.Sub(tk.arrived)) / float64(time.Millisecond)
		waits = append(waits, w)
		if tk.arrived.Before(mid) {
			first = append(first, w)
		} else {
			second = append(second, w)
		}
	}
	m1, m2 := mmPct(first, 0.5), mmPct(second, 0.5)
	ok = float64(matched) >= 0.95*float64(arrived) && m2 <= m1+500 && load.failures() == failed
	fmt.Fprintf(progress, "matchmaking saturation: steady %.0f arrivals/s: %d arrived, %d matched within %v, median wait %.0f then %.0f ms: sustained %v\n",
		rate, arrived, matched, mmSustainWait, m1, m2, ok)
	return ok, math.Round(float64(matched)/w1.Sub(w0).Seconds()*10) / 10, mmPct(waits, 0.5), mmPct(waits, 0.99)
}

// etcdCounters are etcd's own counters, read from its /metrics, and the
// size of its database file and of the part of it in use (gauges: sub and
// add keep a's).
type etcdCounters struct{ requests, writes, events, dbBytes, dbInUseBytes float64 }

func (a etcdCounters) sub(b etcdCounters) etcdCounters {
	return etcdCounters{a.requests - b.requests, a.writes - b.writes, a.events - b.events, a.dbBytes, a.dbInUseBytes}
}

func (a etcdCounters) add(b etcdCounters) etcdCounters {
	return etcdCounters{a.requests + b.requests, a.writes + b.writes, a.events + b.events, a.dbBytes, a.dbInUseBytes}
}

// readEtcdCounters reads the embedded etcd's Prometheus metrics (served on
// its client URL): unary gRPC requests started, proposals applied, watch
// events sent.
func readEtcdCounters(ctx context.Context, endpoint string) (etcdCounters, error) {
	var c etcdCounters
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	if err != nil {
		return c, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch name := line[:i]; {
		case strings.HasPrefix(name, "grpc_server_started_total{") && strings.Contains(name, `grpc_type="unary"`):
			c.requests += v
		case name == "etcd_server_proposals_applied_total":
			c.writes = v
		case name == "etcd_debugging_mvcc_events_total":
			c.events = v
		case name == "etcd_mvcc_db_total_size_in_bytes":
			c.dbBytes = v
		case name == "etcd_mvcc_db_total_size_in_use_in_bytes":
			c.dbInUseBytes = v
		}
	}
	return c, sc.Err()
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
