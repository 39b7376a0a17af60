package matchmaker

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/matchmaking"
	"ludus.dev/ludus/ratings"
)

// Seat is one seat of an allocated match: a player, or a bot.
type Seat struct {
	AccountID string // "" for a bot
	TicketID  string // "" for a bot
	Party     string // party code; "" alone or for a bot
	Rating    float64
	Bot       bool
}

// Allocation is where a match runs.
type Allocation struct {
	GameID string
	NodeID string
	Region string
	// Gateway, if set, is the URL of a gateway in Region the players should
	// join through; "" means the one their FindMatch stream came through.
	Gateway string
}

// Allocator starts a game for a formed match: seats[team][i] are the players
// (and bots) of each team, in the slot order the players are told. An error
// leaves the match's tickets searching; the next scan forms them again.
type Allocator interface {
	Allocate(ctx context.Context, tenant, mode, region string, seats [][]Seat) (Allocation, error)
}

// RatingSource gives a player's rating in a mode. An error fails the
// player's FindMatch with Unavailable.
type RatingSource interface {
	Rating(ctx context.Context, tenant, mode, account string) (ratings.Rating, error)
}

// DefaultRatings rates everyone as a new player (ratings.New()).
type DefaultRatings struct{}

// Rating returns ratings.New().
func (DefaultRatings) Rating(context.Context, string, string, string) (ratings.Rating, error) {
	return ratings.New(), nil
}

// Config configures a replica. State and Allocator are required.
type Config struct {
	State     *clusterstate.Client
	Allocator Allocator
	// Ratings defaults to DefaultRatings.
	Ratings RatingSource
	// ReplicaID names the replica in etcd (results for its streams are
	// under it). Default: a random id.
	ReplicaID string
	// Interval is how often a queue's leader forms matches. Default 250 ms.
	Interval time.Duration
	// LeaseTTL is the replica's lease: how long its tickets outlive it, and
	// how long a queue stays without a leader when its leader dies.
	// Default 5 s.
	LeaseTTL time.Duration
	// StatusInterval is how often a searching stream is told its band and
	// the queue's size. Default 1 s.
	StatusInterval time.Duration
	// AllocateTimeout bounds one Allocate call. Default 10 s.
	AllocateTimeout time.Duration
	// MaxAllocating bounds the matches a leader allocates at once; more wait
	// for the next scan. Default 512.
	MaxAllocating int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// Errors, each mapped to one RPC code at the edge (connectError); their
// messages are safe to show players and studios.
var (
	ErrInvalid          = errors.New("matchmaker: invalid request")            // InvalidArgument
	ErrUnauthenticated  = errors.New("matchmaker: no caller")                  // Unauthenticated
	ErrNoRules          = errors.New("matchmaker: no matchmaking rules")       // NotFound
	ErrNoParty          = errors.New("matchmaker: no such party")              // NotFound
	ErrAlreadySearching = errors.New("matchmaker: already searching")          // AlreadyExists
	ErrPartyFull        = errors.New("matchmaker: the party is full")          // FailedPrecondition
	ErrTooManyModes     = errors.New("matchmaker: too many modes")             // ResourceExhausted
	ErrUnavailable      = errors.New("matchmaker: matchmaking is unavailable") // Unavailable
	// ErrOverloaded: etcd is not keeping up with the searches starting, so
	// this one is refused at once rather than queued (Unavailable).
	ErrOverloaded = fmt.Errorf("%w: too many searches are starting at once; search again in a moment", ErrUnavailable)
)

// Matchmaker is one replica. It serves FindMatch and CreateParty for
// players, and leads the queues it wins the election of.
type Matchmaker struct {
	cfg   Config
	state *clusterstate.Client
	log   *slog.Logger
	valid protovalidate.Validator

	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	leaseMu sync.Mutex
	lease   *clusterstate.Lease

	mu      sync.Mutex
	waiters map[string]*waiter // tenant/account -> the account's stream here
	queues  map[string]context.CancelFunc
	rules   map[string]queueRules // tenant/mode -> the queue's rules, as WatchMatchQueues last told
	leaders map[string]*leader    // tenant/mode -> this replica's term leading the queue
	sizes   map[string]queueSize

	resultLeases, partyLeases sharedLease // leases shared by the results and the parties written meanwhile

	allocMu   sync.Mutex
	allocDurs []time.Duration // ring of the last allocLatencyWindow
	allocNext int

	// faults, when set (tests only), makes the replica's watches lag
	// behind etcd and its writes lose their answers, as they do while
	// etcd elects a leader.
	faults atomic.Pointer[testFaults]
}

// testFaults are the faults a test injects (Matchmaker.faults). Each may
// be nil.
type testFaults struct {
	partyChange func() // before a party's change reaches its search
	result      func() // before a result reaches its search
	resultRead  func() // before a search reads its result from etcd
	// lostAnswer, after a search's write was applied (what: "enqueue",
	// "party ticket" or "join"), returns the error the search gets instead
	// of the answer: the write was applied, the answer lost. Before a
	// search's deletion ("end"), an error stands for etcd's answer that
	// never came, and the deletion is not sent.
	// ctx is the search's stream's.
	lostAnswer func(ctx context.Context, what, account string) error
}

func (f *testFaults) lose(ctx context.Context, what, account string) error {
	if f == nil || f.lostAnswer == nil {
		return nil
	}
	return f.lostAnswer(ctx, what, account)
}

const allocLatencyWindow = 100_000

type queueSize struct {
	n  int
	at time.Time
}

// queueRules is a queue's rules as stored and as decoded.
type queueRules struct {
	raw   []byte
	rules matchmaking.Rules
	err   error // the stored rules do not decode
}

// sharedLease is a lease (not kept alive) that keys written within a short
// while of each other share: one grant for many results or parties.
type sharedLease struct {
	mu        sync.Mutex
	id        int64
	grantedAt time.Time
}

// get returns the lease if it was granted less than reuse ago, else grants
// a new one of ttl; it also returns when the lease was granted.
func (l *sharedLease) get(ctx context.Context, state *clusterstate.Client, now time.Time, reuse, ttl time.Duration) (int64, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != 0 && now.Sub(l.grantedAt) < reuse && !now.Before(l.grantedAt) {
		return l.id, l.grantedAt, nil
	}
	id, err := state.GrantExpiringLease(ctx, ttl)
	if err != nil {
		return 0, time.Time{}, err
	}
	l.id, l.grantedAt = id, now
	return id, now, nil
}

// New starts a replica: it grants its lease, watches the results for its
// streams and campaigns for every queue with rules. Close stops it.
func New(cfg Config) (*Matchmaker, error) {
	if cfg.State == nil || cfg.Allocator == nil {
		return nil, errors.New("matchmaker: Config.State and Config.Allocator are required")
	}
	if cfg.Ratings == nil {
		cfg.Ratings = DefaultRatings{}
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "mm-" + randomID(8)
	}
	if !clusterstate.ValidID(cfg.ReplicaID) {
		return nil, fmt.Errorf("matchmaker: replica id %q must be 1 to 64 letters, digits, - or _", cfg.ReplicaID)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Second
	}
	if cfg.AllocateTimeout <= 0 {
		cfg.AllocateTimeout = 10 * time.Second
	}
	if cfg.MaxAllocating <= 0 {
		cfg.MaxAllocating = 512
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	v, err := newValidator()
	if err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	m := &Matchmaker{
		cfg: cfg, state: cfg.State, log: cfg.Log.With("replica", cfg.ReplicaID), valid: v,
		life: life, cancel: cancel,
		waiters: map[string]*waiter{}, queues: map[string]context.CancelFunc{},
		rules: map[string]queueRules{}, leaders: map[string]*leader{}, sizes: map[string]queueSize{},
	}
	lease, err := m.state.GrantLease(life, cfg.LeaseTTL)
	if err != nil {
		cancel()
		return nil, err
	}
	m.lease = lease
	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.keepLease() }()
	go func() { defer m.wg.Done(); m.state.WatchResults(life, cfg.ReplicaID, m.deliver) }()
	go func() { defer m.wg.Done(); m.state.WatchMatchQueues(life, m.queueChanged) }()
	return m, nil
}

// ID is the replica's id.
func (m *Matchmaker) ID() string { return m.cfg.ReplicaID }

// Close stops the replica: its streams end, it resigns the queues it leads
// and revokes its lease (its tickets leave the queues at once).
func (m *Matchmaker) Close() error {
	m.cancel()
	m.wg.Wait()
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	return m.lease.Close()
}

// endLater deletes an ended search's keys (clusterstate.EndSearch) in the
// background, again and again, until etcd takes the deletion, the lease the
// keys are bound to ends (they go with it), or the replica closes (Close
// revokes the lease). The deletion is safe to repeat: the search key goes
// only while it still holds the search's token.
func (m *Matchmaker) endLater(tenant, account, token string, keys []clusterstate.OwnedKey, lease *clusterstate.Lease) {
	go func() {
		for wait := 200 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			select {
			case <-m.life.Done():
				return
			case <-lease.Done():
				return
			case <-time.After(wait):
			}
			ctx, cancel := context.WithTimeout(m.life, 5*time.Second)
			_, err := m.state.EndSearchOwned(ctx, tenant, account, token, keys...)
			cancel()
			if err == nil {
				m.log.Info("left the queue after trying again", "tenant", tenant, "account", account)
				return
			}
		}
	}()
}

// currentLease is the replica's lease now.
func (m *Matchmaker) currentLease() *clusterstate.Lease {
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	return m.lease
}

// keepLease grants a new lease when the current one is lost (etcd was
// unreachable for longer than its TTL). Streams under the lost one end with
// Unavailable; their players queue again.
func (m *Matchmaker) keepLease() {
	for {
		lease := m.currentLease()
		select {
		case <-m.life.Done():
			return
		case <-lease.Done():
		}
		if m.life.Err() != nil {
			return
		}
		m.log.Warn("matchmaker lease lost; granting a new one")
		for m.life.Err() == nil {
			next, err := m.state.GrantLease(m.life, m.cfg.LeaseTTL)
			if err == nil {
				m.leaseMu.Lock()
				m.lease = next
				m.leaseMu.Unlock()
				break
			}
			select {
			case <-m.life.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// queueChanged keeps a queue's rules (nil: deleted) and starts or stops
// campaigning for the queue.
func (m *Matchmaker) queueChanged(tenant, mode string, raw []byte) {
	key := tenant + "/" + mode
	present := raw != nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if present {
		if old, ok := m.rules[key]; !ok || string(old.raw) != string(raw) {
			r, err := decodeRules(tenant, raw)
			m.rules[key] = queueRules{raw: raw, rules: r, err: err}
		}
	} else {
		delete(m.rules, key)
	}
	stop, running := m.queues[key]
	switch {
	case present && !running:
		ctx, cancel := context.WithCancel(m.life)
		m.queues[key] = cancel
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.campaign(ctx, tenant, mode) }()
	case !present && running:
		stop()
		delete(m.queues, key)
	}
}

// Leading reports whether this replica leads the queue now.
func (m *Matchmaker) Leading(tenant, mode string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaders[tenant+"/"+mode] != nil
}

// AllocateLatency returns the median and 99th percentile of the Allocate
// calls this replica made (over the last 100,000), and how many.
func (m *Matchmaker) AllocateLatency() (p50, p99 time.Duration, n int) {
	m.allocMu.Lock()
	ds := slices.Clone(m.allocDurs)
	m.allocMu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(ds)))) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return at(0.5), at(0.99), len(ds)
}

func (m *Matchmaker) recordAllocate(d time.Duration) {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	if len(m.allocDurs) < allocLatencyWindow {
		m.allocDurs = append(m.allocDurs, d)
		return
	}
	m.allocDurs[m.allocNext] = d
	m.allocNext = (m.allocNext + 1) % allocLatencyWindow
}

// setLeader records this replica's term leading a queue (nil: it ended).
func (m *Matchmaker) setLeader(tenant, mode string, ld *leader) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ld != nil {
		m.leaders[tenant+"/"+mode] = ld
	} else {
		delete(m.leaders, tenant+"/"+mode)
	}
}

// queueSize returns the queue's ticket count: the leader's own count on the
// replica that leads the queue; elsewhere the count the leader publishes
// (clusterstate.QueueSize), read at most once a second per queue by this
// replica, or, while no leader publishes one, etcd's count of the tickets,
// which costs etcd in proportion to the queue's recent traffic.
func (m *Matchmaker) queueSize(ctx context.Context, tenant, mode string) int {
	key := tenant + "/" + mode
	now := m.cfg.Now()
	m.mu.Lock()
	if ld := m.leaders[key]; ld != nil {
		m.mu.Unlock()
		if n, ok := ld.size(); ok {
			return n
		}
		m.mu.Lock()
	}
	s, ok := m.sizes[key]
	if ok && now.Sub(s.at) < time.Second {
		m.mu.Unlock()
		return s.n
	}
	m.sizes[key] = queueSize{n: s.n, at: now} // others use the old value meanwhile
	m.mu.Unlock()
	n, published, err := m.state.QueueSize(ctx, tenant, mode)
	if err == nil && !published {
		n, err = m.state.CountTickets(ctx, tenant, mode)
	}
	if err != nil {
		return s.n
	}
	m.mu.Lock()
	m.sizes[key] = queueSize{n: n, at: now}
	m.mu.Unlock()
	return n
}

// resultsLease returns a lease for results, renewed every 10 s: a result
// lives 30 s at most.
func (m *Matchmaker) resultsLease(ctx context.Context) (int64, error) {
	id, _, err := m.resultLeases.get(ctx, m.state, time.Now(), 10*time.Second, 30*time.Second)
	return id, err
}

// partyLeaseShare is how long parties created one after the other share a
// lease: each lives PartyTTL at least, and at most this much longer.
const partyLeaseShare = 10 * time.Second

// partyLease returns a lease for new parties and when it expires. Leases
// run on etcd's clock, not the injected one: a test's frozen clock must not
// keep a lease in use past its end.
func (m *Matchmaker) partyLease(ctx context.Context) (int64, time.Time, error) {
	ttl := PartyTTL + partyLeaseShare
	id, at, err := m.partyLeases.get(ctx, m.state, time.Now(), partyLeaseShare, ttl)
	return id, at.Add(ttl), err
}

func newValidator() (protovalidate.Validator, error) {
	v, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("matchmaker: request validator: %w", err)
	}
	return v, nil
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToLower(b32.EncodeToString(b))
}
