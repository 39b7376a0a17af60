package gateway

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Limits bound what one client can ask of a gateway. Zero fields take the
// defaults of DefaultLimits; a negative count or rate means no limit.
type Limits struct {
	// MaxStreamsPerAccount is how many frame streams (StreamFrames, Spectate and
	// Play together) one account may hold open on this gateway. Default 8.
	// Exceeded: ResourceExhausted.
	MaxStreamsPerAccount int
	// InputsPerSecond and InputBurst size the token bucket of each account's
	// inputs (SendInput and Play inputs together). Default 60/s with a burst of
	// 120. Exceeded: ResourceExhausted (SendInput: that call; Play: the stream
	// ends).
	InputsPerSecond float64
	InputBurst      int
	// MatchmakingCallsPerSecond and MatchmakingBurst size the token bucket
	// of each account's MatchmakingService calls (FindMatch and CreateParty
	// together): a player searches a few times a minute, and each call
	// writes to etcd, which every game of the cluster shares. Default 1/s
	// with a burst of 10. Exceeded: ResourceExhausted, before the call
	// reaches the matchmaker.
	MatchmakingCallsPerSecond float64
	MatchmakingBurst          int
	// GamesPerMinute and GamesBurst size the token bucket of each account's
	// CreateGame calls on this gateway: a player starts a game now and then,
	// and each game takes a place on a sim node, whose capacity every tenant
	// shares, for at least the minute an unplayed game lives. Default 10 a
	// minute with a burst of 10; negative GamesPerMinute: no limit. Exceeded:
	// ResourceExhausted with the wait (and Retry-After). A tenant's quota
	// (games_per_minute) may be lower; it applies too.
	GamesPerMinute float64
	GamesBurst     int
	// JoinsPerMinute and JoinsBurst size the token bucket of each account's
	// JoinGame calls on this gateway: a player joins a game when they open it
	// (and again after 30 s away); each join is a database transaction and a
	// seat, and a seat keeps an unplayed game alive. Default 30 a minute with
	// a burst of 10; negative JoinsPerMinute: no limit.
	JoinsPerMinute float64
	JoinsBurst     int
	// MaxMessageBytes is the largest request message the gateway reads. Default
	// 64 KiB. Exceeded: ResourceExhausted, before the message is decoded.
	MaxMessageBytes int
	// MaxInputBytes is the largest input payload. Default 256. Exceeded:
	// InvalidArgument.
	MaxInputBytes int
	// MaxConfigBytes is the largest CreateGame config. Default 4 KiB. Exceeded:
	// InvalidArgument.
	MaxConfigBytes int
	// MaxPendingInputs is how many inputs of a Play stream may wait for their
	// acknowledgement. Default 64. Exceeded: ResourceExhausted (the stream ends).
	MaxPendingInputs int
	// MaxAuthMessageBytes is the largest request body passed to the backend's
	// AuthService (anonymous callers). Default 16 KiB. Exceeded:
	// ResourceExhausted, from the gateway; the backend never sees the body.
	MaxAuthMessageBytes int
	// MaxAdminMessageBytes is the largest request body passed to the backend's
	// AdminService (but UploadModule), FleetService and ProgressionService, and
	// to /.well-known/. Default 256 KiB. Exceeded: ResourceExhausted, from the
	// gateway.
	MaxAdminMessageBytes int
	// MaxUploadBytes is the largest AdminService.UploadModule request body
	// passed to the backend. Default 33 MiB: a module of the backend's
	// MaxModuleBytes (32 MiB) and the rest of the message. Exceeded:
	// ResourceExhausted, from the gateway.
	MaxUploadBytes int
	// BodyReadTimeout is how long a request body of a unary or server-streaming
	// call may take to arrive (plus 1/MinBodyRate s per byte received; see
	// GuardBodies). Default 10 s; negative: no deadline. Exceeded:
	// DeadlineExceeded, and the handler is released.
	BodyReadTimeout time.Duration
}

// DefaultLimits are the limits of a gateway whose Config leaves them zero.
var DefaultLimits = Limits{
	MaxStreamsPerAccount:      8,
	InputsPerSecond:           60,
	InputBurst:                120,
	MatchmakingCallsPerSecond: 1,
	MatchmakingBurst:          10,
	GamesPerMinute:            10,
	GamesBurst:                10,
	JoinsPerMinute:            30,
	JoinsBurst:                10,
	MaxMessageBytes:           64 << 10,
	MaxInputBytes:             256,
	MaxConfigBytes:            4 << 10,
	MaxPendingInputs:          64,
	MaxAuthMessageBytes:       16 << 10,
	MaxAdminMessageBytes:      256 << 10,
	MaxUploadBytes:            33 << 20,
	BodyReadTimeout:           DefaultBodyReadTimeout,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxStreamsPerAccount == 0 {
		l.MaxStreamsPerAccount = d.MaxStreamsPerAccount
	}
	if l.InputsPerSecond == 0 {
		l.InputsPerSecond = d.InputsPerSecond
	}
	if l.InputBurst <= 0 {
		l.InputBurst = d.InputBurst
	}
	if l.MatchmakingCallsPerSecond == 0 {
		l.MatchmakingCallsPerSecond = d.MatchmakingCallsPerSecond
	}
	if l.MatchmakingBurst <= 0 {
		l.MatchmakingBurst = d.MatchmakingBurst
	}
	if l.GamesPerMinute == 0 {
		l.GamesPerMinute = d.GamesPerMinute
	}
	if l.GamesBurst <= 0 {
		l.GamesBurst = d.GamesBurst
	}
	if l.JoinsPerMinute == 0 {
		l.JoinsPerMinute = d.JoinsPerMinute
	}
	if l.JoinsBurst <= 0 {
		l.JoinsBurst = d.JoinsBurst
	}
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = d.MaxMessageBytes
	}
	if l.MaxInputBytes <= 0 {
		l.MaxInputBytes = d.MaxInputBytes
	}
	if l.MaxConfigBytes <= 0 {
		l.MaxConfigBytes = d.MaxConfigBytes
	}
	if l.MaxPendingInputs <= 0 {
		l.MaxPendingInputs = d.MaxPendingInputs
	}
	if l.MaxAuthMessageBytes <= 0 {
		l.MaxAuthMessageBytes = d.MaxAuthMessageBytes
	}
	if l.MaxAdminMessageBytes <= 0 {
		l.MaxAdminMessageBytes = d.MaxAdminMessageBytes
	}
	if l.MaxUploadBytes <= 0 {
		l.MaxUploadBytes = d.MaxUploadBytes
	}
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = d.BodyReadTimeout
	}
	return l
}

// streamCounter counts open streams per account.
type streamCounter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// acquire takes a stream slot for account, or fails with ResourceExhausted.
func (c *streamCounter) acquire(account string) (release func(), err error) {
	if c.max < 0 {
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[account] >= c.max {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("too many open streams: this account already has %d open on this gateway (the limit is %d); close one first", c.n[account], c.max))
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[account]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[account]--; c.n[account] <= 0 {
				delete(c.n, account)
			}
		})
	}, nil
}

// accountLimiter is a token bucket per account.
type accountLimiter struct {
	what string // what it counts, plural ("inputs"): for its error
	// perMinute: its error states the rate a minute (slow limits).
	perMinute bool
	rate      float64 // tokens per second; negative: unlimited
	burst     float64
	now       func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// newInputLimiter limits inputs (SendInput and Play together).
func newInputLimiter(rate float64, burst int) *accountLimiter {
	return newAccountLimiter("inputs", rate, burst)
}

func newAccountLimiter(what string, rate float64, burst int) *accountLimiter {
	return &accountLimiter{what: what, rate: rate, burst: float64(burst), now: time.Now, buckets: map[string]*bucket{}}
}

// statedPerMinute makes l's error state its rate a minute.
func (l *accountLimiter) statedPerMinute() *accountLimiter {
	l.perMinute = true
	return l
}

// allow takes one token of account's bucket, or fails with ResourceExhausted.
func (l *accountLimiter) allow(account string) error { return l.use(account, true) }

// check fails with ResourceExhausted if account's bucket is empty, taking
// nothing; charge takes a token afterwards, for calls whose cost is known
// only from their outcome (calls running at once may each pass the check).
func (l *accountLimiter) check(account string) error { return l.use(account, false) }

func (l *accountLimiter) charge(account string) { _ = l.use(account, true) }

func (l *accountLimiter) use(account string, take bool) error {
	if l.rate < 0 {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Drop buckets that have refilled completely: they hold no information.
	if full := time.Duration(l.burst / l.rate * float64(time.Second)); now.Sub(l.swept) > max(full, time.Minute) {
		for k, b := range l.buckets {
			if now.Sub(b.at) > full {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b, ok := l.buckets[account]
	if !ok {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[account] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
		rate := fmt.Sprintf("%g %s per second", l.rate, l.what)
		if l.perMinute {
			rate = fmt.Sprintf("%g %s a minute", math.Round(l.rate*60*100)/100, l.what)
		}
		return exhausted(wait, "%s rate limit: at most %s per account (bursts of %g); slow down: retry in %d s",
			strings.TrimSuffix(l.what, "s"), rate, l.burst, retrySeconds(wait))
	}
	if take {
		b.tokens--
	}
	return nil
}
