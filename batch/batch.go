// Package batch plays batch runs of headless games: thousands of bot games of
// one module build, across maps (configs), seeds and sides, as fast as the
// CPU allows, spread over the sim nodes of the fleet.
//
// A run (Spec) is admitted against the tenant's spend cap (Admit), becomes a
// queue in etcd with one item per game (package clusterstate, batch.go), and
// is played by Workers: each claims an item under its etcd lease, plays the
// game with a Runner (no views, no pacing, bounded by the game's tick
// deadline), stores the result in the backend (a WorkerBackend: the backend's
// Server in its process, a RemoteBackend calling BatchWorkerService with a
// sim node's own credential elsewhere) and only then acknowledges the item.
// A worker that dies loses its lease and its items go back to the queue (one
// that loses its lease to an etcd outage abandons its games in flight and
// goes on under a new lease); the store keeps the first result of each game,
// so every game has exactly one, and a game that lost its worker MaxAttempts
// times is recorded as failed. A run ends by itself: when every game is in,
// at its wall-clock deadline, or when its CPU budget is spent; its games in
// flight then stop, and the CPU of every game not acknowledged is charged to
// its run all the same (clusterstate.ChargeBatchCPU); a reaper elected among
// the backends' workers (or RunReaper) ends overdue runs and items, removes
// orphaned queues and records the usage of runs nobody recorded.
//
// Service serves BatchService (proto/ludus/v1/batch.proto) to studios; the
// summary (Summarize: wins per side and per map with Wilson score intervals)
// and its chart (Chart) are what `ludus ctl batch run` prints.
package batch

import (
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Limits of a run's spec.
const (
	// MaxGames is the most games a run may have.
	MaxGames = 100_000
	// MaxMaps and MaxSeeds bound the lists of a spec.
	MaxMaps  = 256
	MaxSeeds = 100_000
	// MaxSides is the most sides a run may rotate through.
	MaxSides = 16
	// MaxConfigBytes bounds each map's config.
	MaxConfigBytes = 64 << 10
	// MaxDeadline is the longest run deadline; DefaultDeadline the one used
	// when a spec has none.
	MaxDeadline     = 24 * time.Hour
	DefaultDeadline = time.Hour
	// DefaultGameSeconds is the per-game deadline, in game seconds, when a
	// spec gives none; MaxGameTicks the largest per-game deadline.
	DefaultGameSeconds = 600
	MaxGameTicks       = 10_000_000
)

// ErrInvalidSpec wraps every reason a spec is refused; the message is meant
// for the person who wrote the spec.
var ErrInvalidSpec = errors.New("invalid batch run")

// Map is one configuration a run plays on.
type Map struct {
	// Name labels the map in results and summaries; default "map{i}".
	Name string `json:"name"`
	// Config is the module's config (JSON); empty means the module's defaults.
	Config json.RawMessage `json:"config,omitempty"`
}

// Spec describes a run.
type Spec struct {
	// Module is the name of a module of the tenant; BuildID pins one of its
	// builds (default: the newest build under Module). One of them is
	// required.
	Module  string `json:"module,omitempty"`
	BuildID string `json:"build_id,omitempty"`
	// Maps are the configs played; at least one.
	Maps []Map `json:"maps"`
	// Seeds are the match seeds; games beyond maps × sides × seeds get
	// seeds derived from their number (Game).
	Seeds []uint64 `json:"seeds,omitempty"`
	// Sides is how many sides each map and seed is played from (default 1):
	// with more, each game's config gets "side": s (0 ≤ s < Sides) added, for
	// modules that seat the bot under test by it.
	Sides int `json:"sides,omitempty"`
	// Games is the number of games, 1..MaxGames.
	Games int `json:"games"`
	// GameTicks is the per-game deadline in ticks: a game still running then
	// is stopped and counted as timed out. Default DefaultGameSeconds of
	// game time.
	GameTicks int64 `json:"game_ticks,omitempty"`
	// Deadline is the run's wall-clock deadline, from admission. Default
	// DefaultDeadline, at most MaxDeadline.
	Deadline time.Duration `json:"deadline,omitempty"`
	// Budget is the run's CPU budget (CPU time of the games); required. It is
	// the run's worst case against the tenant's spend cap; the run ends once
	// it has spent it.
	Budget time.Duration `json:"budget"`
	// TickRate is the module's tick rate, set at admission.
	TickRate int `json:"tick_rate,omitempty"`
	// KeepLogs keeps each game's input log (with a state hash per game
	// second) in the run's archive.
	KeepLogs bool `json:"keep_logs,omitempty"`
}

// Game is one game of a run.
type Game struct {
	N    int    `json:"n"`
	Map  int    `json:"map"`
	Seed uint64 `json:"seed"`
	Side int    `json:"side"`
}

// Check validates a spec and fills its defaults (tickRate is the module's,
// for the default game deadline; 0 skips that default).
func (s *Spec) Check(tickRate int) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Module == "" && s.BuildID == "":
		return bad("name a module (or a build id)")
	case s.Games <= 0:
		return bad("games must be at least 1 (got %d)", s.Games)
	case s.Games > MaxGames:
		return bad("games must be at most %d (got %d)", MaxGames, s.Games)
	case len(s.Maps) > MaxMaps:
		return bad("at most %d maps (got %d)", MaxMaps, len(s.Maps))
	case len(s.Seeds) > MaxSeeds:
		return bad("at most %d seeds (got %d)", MaxSeeds, len(s.Seeds))
	case s.Sides < 0 || s.Sides > MaxSides:
		return bad("sides must be 1..%d (got %d)", MaxSides, s.Sides)
	case s.GameTicks < 0 || s.GameTicks > MaxGameTicks:
		return bad("the game deadline must be 1..%d ticks (got %d)", MaxGameTicks, s.GameTicks)
	case s.Deadline < 0 || s.Deadline > MaxDeadline:
		return bad("the run deadline must be at most %v (got %v)", MaxDeadline, s.Deadline)
	case s.Budget <= 0:
		return bad("a CPU budget is required (e.g. 10m of CPU time)")
	}
	if len(s.Maps) == 0 {
		s.Maps = []Map{{}}
	}
	names := map[string]bool{}
	for i := range s.Maps {
		m := &s.Maps[i]
		if m.Name == "" {
			m.Name = fmt.Sprintf("map%d", i)
		}
		if len(m.Name) > 64 || strings.ContainsAny(m.Name, "\n\r\t") {
			return bad("map name %.64q: at most 64 characters, one line", m.Name)
		}
		if names[m.Name] {
			return bad("two maps are named %q", m.Name)
		}
		names[m.Name] = true
		if len(m.Config) > MaxConfigBytes {
			return bad("map %s: config of %d bytes (at most %d)", m.Name, len(m.Config), MaxConfigBytes)
		}
		if len(m.Config) > 0 {
			var v any
			if err := json.Unmarshal(m.Config, &v); err != nil {
				return bad("map %s: config is not JSON: %v", m.Name, err)
			}
			if _, ok := v.(map[string]any); !ok && s.Sides > 1 {
				return bad("map %s: with sides the config must be a JSON object", m.Name)
			}
		}
	}
	if s.Sides == 0 {
		s.Sides = 1
	}
	if s.Deadline == 0 {
		s.Deadline = DefaultDeadline
	}
	if s.GameTicks == 0 && tickRate > 0 {
		s.GameTicks = int64(tickRate) * DefaultGameSeconds
	}
	return nil
}

// Game returns game n of the run (0 ≤ n < Games): maps vary fastest, then
// sides, then seeds. Seed k is Seeds[k], or, past the list, a seed mixed
// from k (SplitMix64), so the same spec always plays the same games.
func (s *Spec) Game(n int) Game {
	m := n % len(s.Maps)
	rest := n / len(s.Maps)
	sides := max(s.Sides, 1)
	side := rest % sides
	k := rest / sides
	var seed uint64
	if k < len(s.Seeds) {
		seed = s.Seeds[k]
	} else {
		seed = splitmix64(uint64(k) + 0x9E3779B97F4A7C15)
	}
	return Game{N: n, Map: m, Seed: seed, Side: side}
}

// Config returns game g's config: its map's, with "side" set when the run has
// more than one side.
func (s *Spec) Config(g Game) ([]byte, error) {
	cfg := s.Maps[g.Map].Config
	if s.Sides <= 1 {
		return cfg, nil
	}
	obj := map[string]json.RawMessage{}
	if len(cfg) > 0 {
		if err := json.Unmarshal(cfg, &obj); err != nil {
			return nil, err
		}
	}
	obj["side"] = json.RawMessage(fmt.Sprint(g.Side))
	return json.Marshal(obj)
}

func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// Result is one game's outcome.
type Result struct {
	Game
	MapName string `json:"map_name"`
	// Winner is the module's result's winner (a slot), -1 for none.
	Winner int   `json:"winner"`
	Ticks  int64 `json:"ticks"`
	// Ended: the game ended by itself; TimedOut: it reached the game deadline.
	Ended    bool          `json:"ended"`
	TimedOut bool          `json:"timed_out"`
	CPU      time.Duration `json:"cpu_ns"`
	// Result is the module's result JSON.
	Result json.RawMessage `json:"result,omitempty"`
	// Log is the game's input log, if the run keeps them.
	Log []byte `json:"-"`
	// Error is set when the module failed (a trap): the game counts as failed.
	Error  string `json:"error,omitempty"`
	Worker string `json:"worker,omitempty"`
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)
