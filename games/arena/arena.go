// Package arena is a 2–8 player first-person deathmatch for Ludus, in the
// spirit of early-90s raycasters: a grid map, textured walls, billboard players
// and a hitscan gun, seen in 320×200 indexed8 frames at 17.5 frames/s.
//
// Views are split in two (docs/ABI.md, "Snapshots and ludus_render"): View is
// the authoritative side, a ~100-300 byte snapshot per viewer holding only what
// that player may see (snapshot.go), and Render draws a snapshot into the frame
// (renderer.go: the raycaster, the HUD and the spectator's map). Render reads
// nothing but its input, so clients (or a node, for thin clients) can run it on
// a module where no match was started.
//
// Everything is pure Go with no build tags: the game runs and is tested natively,
// and games/arena/module wraps it into a wasip1 module through ludus.dev/ludus/sdk.
// All state is integer or 16.16 fixed point (sdk.Fixed, sdk.Angle), randomness
// comes from one sdk.Rand seeded by the match seed, and nothing iterates a map,
// so the same seed, config and events give the same state, snapshots and
// frames everywhere.
//
// Input is one byte per message, the held buttons (BtnForward ... BtnFire); the
// latest byte applies every tick until the next one. A page with mouse look
// appends the aim (events.go, takeAim): the player turns towards it no faster
// than the turn keys turn it. Config is optional JSON,
// {"bots":N,"score_limit":S,"time_limit_s":T} (see Config). Bots take the
// highest slots and steer through the same input path as humans. Score is
// kills; the match ends at the score limit or the time limit.
package arena

import (
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// Module metadata (docs/ABI.md).
const (
	Name         = "arena"
	TickRate     = 35
	MaxPlayers   = 8
	FrameDivisor = 2
	ViewWidth    = 320
	ViewHeight   = 200
)

// Game is one arena match. The zero value is not usable; call New. A Game is
// not safe for concurrent use.
type Game struct {
	st state

	// Scratch space reused every tick and snapshot so that Step and View do
	// not allocate. None of it is game state.
	shots  [MaxPlayers]shot
	botBuf [1]byte
	enc    []byte
	snap   [max(SnapshotPlayerSize, SnapshotSpectatorSize)]byte // returned by View

	// rend draws snapshots for Render; nil until the first call, so an
	// authoritative instance never allocates its frame buffer.
	rend *Renderer
}

var (
	_ sdk.Game         = (*Game)(nil)
	_ sdk.Checkpointer = (*Game)(nil)
)

// New returns a game ready to Step: a match with seed 0, the default config and
// no bots. The host calls Init before the first tick anyway.
func New() *Game {
	g := &Game{}
	g.st.reset(0, defaultConfig())
	return g
}

// Meta describes the module.
func (g *Game) Meta() abi.Meta {
	return abi.Meta{
		Name:         Name,
		TickRate:     TickRate,
		MaxPlayers:   MaxPlayers,
		FrameDivisor: FrameDivisor,
		ViewFormat:   abi.Indexed8Format,
		ViewWidth:    ViewWidth,
		ViewHeight:   ViewHeight,
		// Inputs are the held buttons: the latest replaces the previous one.
		InputKind:      abi.InputState,
		SnapshotFormat: SnapshotFormat,
		// What a page needs to present the arena: its keys are data, not code.
		Title:    Title,
		Hint:     Hint,
		Controls: controls, // shared, so Meta does not allocate (sdk.ApplyEvents calls it)
		Bots:     true,
	}
}

// Page metadata (docs/ABI.md, "Metadata for pages").
const (
	Title = "Arena"
	Hint  = "Shoot the others, dodge their shots. A kill scores a point."
)

// controls are the arena's buttons as page controls: bit i of the input byte is
// the button 1<<i (BtnForward ... BtnFire). Fire also lists "Mouse", which asks
// pages for mouse look (docs/ABI.md, "Metadata for pages"): with the pointer
// locked on the view, the mouse button fires and the movement is sent as the
// aim that takeAim reads. Callers of Meta must not modify them.
var controls = []abi.Control{
	{Keys: []string{"KeyW", "ArrowUp"}, Label: "forward", Bit: 0},
	{Keys: []string{"KeyS", "ArrowDown"}, Label: "back", Bit: 1},
	{Keys: []string{"KeyA", "ArrowLeft"}, Label: "turn left", Bit: 2},
	{Keys: []string{"KeyD", "ArrowRight"}, Label: "turn right", Bit: 3},
	{Keys: []string{"KeyQ"}, Label: "strafe left", Bit: 4},
	{Keys: []string{"KeyE"}, Label: "strafe right", Bit: 5},
	{Keys: []string{"Space", "Mouse"}, Label: "fire", Bit: 6},
}

// Init starts a new match from seed and a JSON config (see Config). Invalid JSON
// is an error; an empty config means the defaults.
func (g *Game) Init(seed uint64, config []byte) error {
	cfg, err := ParseConfig(config)
	if err != nil {
		return err
	}
	g.st.reset(seed, cfg)
	return nil
}
