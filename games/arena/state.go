package arena

import "ludus.dev/ludus/sdk"

// Gameplay tuning. Speeds are per tick (35 ticks/s); distances are in map cells.
const (
	maxHealth    = 100
	fireCooldown = 10 // ticks between shots (3.5 shots/s)
	damageMin    = 20 // hitscan damage is uniform in damageMin..damageMax
	damageMax    = 34
	respawnTicks = 2 * TickRate    // dead for ~2 s
	flashTicks   = 3               // muzzle flash / tracer duration
	hurtTicks    = 6               // red damage border duration
	turnSpeed    = sdk.Angle(800)  // ≈4.4° per tick, 154°/s
	moveSpeed    = sdk.Fixed(6554) // 0.1 cell per tick
	strafeSpeed  = sdk.Fixed(5243) // 0.08 cell per tick
	playerRadius = sdk.Fixed(sdk.FixedOne / 4)
	hitRadius    = sdk.Fixed(sdk.FixedOne * 7 / 20) // 0.35 cell
	maxNameBytes = 32
	inputMask    = 0x7F // the seven buttons; bit 7 is ignored

	// Mouse look (docs/ABI.md, "Arena input payload"): aimBytes follow the
	// button byte in a mouse-look input. A player owes at most maxAimOwed of
	// turning (half a turn); the rest of a faster flick is dropped, so a
	// mouse turns no faster than the turn keys (turnSpeed per tick).
	aimBytes   = 6
	maxAimOwed = int32(1 << 15)
)

// Input bits (docs/ABI.md, "Arena input payload").
const (
	BtnForward uint8 = 1 << iota
	BtnBack
	BtnTurnLeft
	BtnTurnRight
	BtnStrafeLeft
	BtnStrafeRight
	BtnFire
)

// player is one slot. Every field is part of the game state: hashed, saved and
// loaded by checkpoint.go. Keep that file in sync when adding fields.
type player struct {
	active bool // the slot is taken (by a human or a bot)
	bot    bool
	alive  bool
	input  uint8 // latest input mask; persists until the next one
	name   string

	x, y     sdk.Fixed // position in map cells
	angle    sdk.Angle // facing; turning right increases it
	health   int32
	respawn  int32 // ticks until respawn while dead
	cooldown int32 // ticks until the gun can fire again
	flash    int32 // ticks of muzzle flash left
	hurt     int32 // ticks of damage indicator left

	shotX, shotY sdk.Fixed // where the last shot ended (tracers)

	// Combat feedback (feedback.go): the tick this player's shot last hit
	// someone (0: never) and whether that hit killed; the tick this player
	// was last hit and the bearing to the shooter then (256ths of a turn).
	hitTick int64
	hitKill bool
	dmgTick int64
	dmgFrom uint8

	kills, deaths int32

	// Mouse look (applyInput, move): whether the latest input carried an
	// aim, its lock id and its aim (the client's running total of mouse
	// movement, in sdk.Angle units), and the turn still owed to the mouse,
	// paid off at most turnSpeed per tick. Zero for bots and key players, and
	// then absent from checkpoints and state hashes (checkpoint.go).
	aimOn   bool
	aimLock uint16
	aimLast int32
	aimOwed int32

	// Bot brain: a wander timer, a preferred turn direction (-1 left, +1 right)
	// and a strafe mode used to dodge (0 none, 1 left, 2 right).
	botTimer  int32
	botTurn   int8
	botStrafe uint8
}

// state is the whole game state: everything StateHash covers and Save writes.
type state struct {
	seed       uint64
	tick       int64
	ended      bool
	rng        sdk.Rand
	scoreLimit int32
	timeLimit  int32 // in ticks
	players    [MaxPlayers]player
	feed       [feedLen]kill // the kill feed, newest first
}

// shot is a scratch record of one trigger pull during a tick, so that all shots
// of a tick are resolved against the same positions (no slot-order advantage).
type shot struct {
	shooter, target int
	damage          int32
}

// reset starts a fresh match and seats the configured bots from the highest
// slot down, so humans joining later get the low slots.
func (s *state) reset(seed uint64, cfg Config) {
	*s = state{
		seed:       seed,
		rng:        sdk.NewRand(seed),
		scoreLimit: int32(cfg.ScoreLimit),
		timeLimit:  int32(cfg.TimeLimitS * TickRate),
	}
	for i := 0; i < cfg.Bots; i++ {
		slot := MaxPlayers - 1 - i
		s.seat(slot, botName(slot), true)
	}
}

// seat puts a new player (human or bot) into slot and spawns it.
func (s *state) seat(slot int, name string, bot bool) {
	s.players[slot] = player{active: true, bot: bot, name: name}
	if bot {
		p := &s.players[slot]
		p.botTurn = 1
		if s.rng.Intn(2) == 0 {
			p.botTurn = -1
		}
		p.botTimer = int32(s.rng.Range(20, 60))
	}
	s.spawn(slot)
}

// botNames are fixed so that bot names need no allocation or formatting.
var botNames = [MaxPlayers]string{"BOT 0", "BOT 1", "BOT 2", "BOT 3", "BOT 4", "BOT 5", "BOT 6", "BOT 7"}

func botName(slot int) string { return botNames[slot] }

// winner returns the slot with the most kills (ties: fewer deaths, then the
// lower slot), or -1 when nobody plays.
func (s *state) winner() int {
	w := -1
	for i := range s.players {
		p := &s.players[i]
		if !p.active {
			continue
		}
		if w < 0 {
			w = i
			continue
		}
		b := &s.players[w]
		if p.kills > b.kills || (p.kills == b.kills && p.deaths < b.deaths) {
			w = i
		}
	}
	return w
}
