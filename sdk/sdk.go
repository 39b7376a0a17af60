// Package sdk is what a Go game author imports to build a Ludus game module.
//
// A game implements Game (and optionally Checkpointer and Renderer) as
// ordinary, pure Go that builds and tests natively, and calls Register from an
// init function of its main package. When that main package is built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared ...
//
// this package supplies every ludus_* export of docs/ABI.md and forwards the
// host's calls to the registered Game. The package also holds small deterministic
// helpers that games need: a seeded PRNG (Rand), 16.16 fixed-point numbers (Fixed),
// table-driven trigonometry on binary angles (Angle, Sin, Cos) and FNV-1a hashing.
package sdk

import "ludus.dev/ludus/sdk/abi"

// Game is a deterministic, tick-driven game. The SDK calls its methods from a
// single goroutine, one export call at a time.
//
// Slices passed to Init and Input alias the module's scratch buffer and are only
// valid during the call: copy what you keep. Slices returned by View, Save and
// the SDK's encodings of Meta and Result must stay valid until the next call into
// the module, so returning a reused buffer is fine (and recommended for View).
type Game interface {
	// Meta describes the module; it must return the same value every time.
	Meta() abi.Meta
	// Init starts a new match. A non-nil error makes ludus_init fail.
	Init(seed uint64, config []byte) error
	// Join seats a player. Through the SDK, slot is always in 0..MaxPlayers-1.
	Join(slot int, name string)
	// Leave frees a slot.
	Leave(slot int)
	// Input delivers a player's (untrusted) input payload.
	Input(slot int, payload []byte)
	// Step advances one tick after the tick's events were applied and reports
	// whether the match has ended.
	Step() (ended bool)
	// View renders what player slot sees, or the spectator camera for
	// abi.SpectatorSlot. It must not change game state. For a game that
	// declares a snapshot format it returns a snapshot, which its Render
	// draws (see Renderer).
	View(slot int) []byte
	// StateHash is a cheap hash of the whole game state.
	StateHash() uint64
	// Result reports the match result; meaningful once Step returned true.
	Result() abi.Result
}

// Checkpointer is implemented by games that can save and restore their whole
// state. Load gets untrusted bytes in principle: it must validate them and return
// an error instead of panicking, and leave the game unchanged on error. After a
// successful Load the game's StateHash equals the saved game's.
//
// Games that do not implement Checkpointer still export ludus_save and
// ludus_load (exports are static): ludus_save returns an empty slice, which hosts
// treat as "no checkpoint support", and ludus_load fails.
type Checkpointer interface {
	Save() []byte
	Load(b []byte) error
}

// Renderer is implemented by games whose views are snapshots: games that
// declare abi.Meta.SnapshotFormat. Their View returns a compact snapshot of what
// one viewer may know, and Render draws such a snapshot into the indexed8 frame
// of ViewWidth x ViewHeight that clients display (docs/ABI.md, "Snapshots and
// ludus_render"). The SDK exports it as ludus_render.
//
// Render must be a pure function of the snapshot bytes. It runs in browsers and
// on nodes for thin clients, in a module instance where Init was never called
// (only package initialisation and Register ran), so it may read nothing of the
// game state and must change none of it. Snapshots reach it from the network:
// for bytes that are not a valid snapshot it must return a frame anyway (an
// error-coloured one, say) rather than panic. Render need not be deterministic
// across builds, but it must not depend on anything but its input. The
// returned slice must stay valid until the next call into the module, so
// returning a reused frame buffer is fine.
//
// Games without a Renderer are unaffected: the ludus_render export exists in
// every module built with the SDK (exports are static), returns an empty slice
// and is never called by hosts for modules that do not declare a snapshot
// format.
type Renderer interface {
	Render(snapshot []byte) []byte
}

// Frame returns what a client of slot sees: g.View(slot), drawn by g's Render
// when g is a Renderer. It is for native tools and tests that want pixels
// whatever kind of game they drive; the returned slice is valid until the next
// call into g.
func Frame(g Game, slot int) []byte {
	v := g.View(slot)
	if r, ok := g.(Renderer); ok {
		return r.Render(v)
	}
	return v
}

var registered Game

// Register makes g the game served by this module's ludus_* exports. Call it
// exactly once, from an init function of the main package.
func Register(g Game) {
	if g == nil {
		panic("sdk: Register(nil)")
	}
	if registered != nil {
		panic("sdk: Register called twice")
	}
	registered = g
}

// Registered returns the game passed to Register, or nil.
func Registered() Game { return registered }

// errorLine is the stderr line that carries an error's text to the host: one
// line, "error: TEXT" (docs/ABI.md, "Errors and output"), so a multi-line
// error keeps its lines joined by " / ".
func errorLine(text string) string {
	b := make([]byte, 0, len("error: ")+len(text))
	b = append(b, "error: "...)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\n':
			b = append(b, " / "...)
		case '\r':
		default:
			b = append(b, c)
		}
	}
	return string(b)
}
