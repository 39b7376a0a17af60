// Package sdktest checks that a Ludus game is deterministic the way the
// platform needs it to be: it plays one scripted match several ways and
// compares the state hash after every tick.
//
//  1. straight through, twice, from the same seed, never calling View: the two
//     runs must agree (no map order, clocks, host randomness or leftover
//     package state), and StateHash must return the same value when asked
//     twice;
//  2. calling View for every slot and for the spectator every tick, and for
//     games with snapshots, Render on each view, on the match's game and on a
//     fresh game where Init never ran: the hashes must not move (View and
//     Render must not change state) and the frames must agree (Render must
//     draw from the snapshot alone);
//  3. saving a checkpoint every few ticks and going on from a fresh game that
//     loaded it (after Init with the same seed and config, as the host does):
//     the hashes must not move (Save and Load must keep the whole state).
//
// The views and checkpoint runs are played twice too (the second time with
// round trips at other ticks), and the views of both must be the same bytes.
// A difference fails with the first tick that differs, which run found it and
// the likely causes.
//
// Game authors call Run from a test:
//
//	func TestDeterminism(t *testing.T) {
//		sdktest.Run(t, func() sdk.Game { return mygame.New() }, sdktest.Options{
//			Seed: 1, Players: 4, Ticks: 600,
//		})
//	}
//
// Check does the same for anything behind the Target interface; `ludus ctl
// module check` uses it to check a compiled module in the engine. The package
// does not import package testing.
package sdktest

import (
	"errors"
	"fmt"
	"strings"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// Target is a game to check: a factory of fresh instances of it.
type Target interface {
	// Meta is the game's metadata.
	Meta() abi.Meta
	// Start returns a fresh instance on which nothing has been called yet.
	Start() (Instance, error)
}

// Instance is one copy of the game under check. Tick numbers count the
// Steps since Init.
type Instance interface {
	Init(seed uint64, config []byte) error
	// Step applies one tick's events (the wire encoding of docs/ABI.md) and
	// advances the tick.
	Step(events []byte) (ended bool, err error)
	// View returns slot's view (abi.SpectatorSlot for the spectator). The bytes
	// need only stay valid until the next call.
	View(slot int) ([]byte, error)
	StateHash() (uint64, error)
	// Save returns a checkpoint, or nothing when the game has no checkpoints.
	Save() ([]byte, error)
	// Load restores a checkpoint taken after tick ticks.
	Load(tick int64, checkpoint []byte) error
	Close() error
}

// Renderer draws snapshots. An Instance that is also a Renderer draws with
// the match's own state at hand (a native game's Render); Check then compares
// its frames with a renderer where Init never ran. Only games that declare
// Meta.SnapshotFormat are rendered.
type Renderer interface {
	Render(snapshot []byte) ([]byte, error)
}

// RendererTarget is a Target with renderers of their own (an engine's
// Renderer instances). Check draws snapshots with StartRenderer when the
// Target has it, else with Start's Instance, which must then be a Renderer.
type RendererTarget interface {
	Target
	StartRenderer() (RenderCloser, error)
}

// RenderCloser is a Renderer to close after use.
type RenderCloser interface {
	Renderer
	Close() error
}

func (c *checker) startRenderer() (RenderCloser, error) {
	if rt, ok := c.target.(RendererTarget); ok {
		return rt.StartRenderer()
	}
	inst, err := c.target.Start()
	if err != nil {
		return nil, err
	}
	rc, ok := inst.(RenderCloser)
	if !ok {
		inst.Close()
		return nil, fmt.Errorf("the game declares snapshot_format %q but cannot render", c.meta.SnapshotFormat)
	}
	return rc, nil
}

// Script returns the events of one tick (tick 1 is the first Step after
// Init). Check calls it once per tick, in order, and plays the same events in
// every run, so it need not be a pure function.
type Script func(tick int) []abi.Event

// Options describe the match to play. The zero value plays 300 ticks of seed
// 0 with no config and one player who sends random one-byte inputs.
type Options struct {
	// Seed and Config are passed to Init.
	Seed   uint64
	Config []byte
	// Ticks is how many ticks to play (default 300); the match stops earlier
	// if the game ends.
	Ticks int
	// Players is the number of players of the default script (default 1, at
	// most Meta().MaxPlayers). Ignored when Script is set.
	Players int
	// Input makes one input payload for the default script (default: one
	// random byte, a button mask as the arena and the web client use).
	Input func(r *sdk.Rand, slot int) []byte
	// Script, if set, replaces the default script (RandomScript).
	Script Script
	// CheckpointEvery is the number of ticks between checkpoint round trips
	// (default 10).
	CheckpointEvery int
}

// Report summarises a successful check.
type Report struct {
	Name        string
	Ticks       int64 // ticks played in each run
	Ended       bool  // the match ended before Options.Ticks
	Runs        int   // runs compared
	Views       int   // View calls
	Frames      int   // Render calls
	Checkpoints int   // checkpoint round trips (0: the game has no checkpoints)
	Hash        uint64
}

func (r Report) String() string {
	ck := fmt.Sprintf("%d checkpoint round trips", r.Checkpoints)
	if r.Checkpoints == 0 {
		ck = "no checkpoints (the game does not save)"
	}
	end := ""
	if r.Ended {
		end = " (the match ended)"
	}
	return fmt.Sprintf("%s: %d runs of %d ticks%s agree on every state hash (final %016x); %d views, %d frames rendered, %s",
		r.Name, r.Runs, r.Ticks, end, r.Hash, r.Views, r.Frames, ck)
}

// Likely causes, as they appear in a Divergence.
const (
	CauseViewMutates = "View changed game state: View must only read the game (look for counters, caches or " +
		"lazily built state written in View, or random numbers drawn there)"
	CauseRenderMutates    = "Render changed game state: Render must only read the snapshot it is given"
	CauseRenderReadsState = "Render read game state: it runs where Init never did, so it must draw from the " +
		"snapshot bytes and package-level tables alone"
	CauseMapOrder = "a hash or a decision that depends on map iteration order (range over a map): " +
		"iterate a slice or sorted keys instead"
	CauseHostTime = "wall-clock time or host randomness (time.Now, math/rand or crypto/rand): " +
		"count ticks and draw from an sdk.Rand seeded in Init"
	CauseGlobals  = "state kept outside the game value (package-level variables) that Init does not reset"
	CauseSaveLoad = "Save/Load lost state: fields not serialized (every field that affects later ticks " +
		"must be in the checkpoint, and Load must restore all of it)"
	CauseHashMutates  = "StateHash changed game state"
	CauseUninitBuffer = "view bytes that are not rewritten every call (a reused buffer only partly cleared)"
)

// Divergence is the error Check returns when two runs disagree.
type Divergence struct {
	// Run names the run that disagreed with the reference (the first
	// straight run): "rerun", "statehash", "views", "render", "checkpoint".
	Run string
	// Tick is the first tick at which it disagreed (0: right after Init).
	Tick int64
	// What says what differed.
	What   string
	Causes []string
}

var runTitles = map[string]string{
	"rerun":      "second run from the same seed",
	"statehash":  "StateHash asked twice",
	"views":      "run calling View for every slot and the spectator",
	"render":     "run rendering every view",
	"checkpoint": "run with checkpoint round trips",
}

func (d *Divergence) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "not deterministic: tick %d, %s: %s", d.Tick, runTitles[d.Run], d.What)
	if len(d.Causes) > 0 {
		b.WriteString("\nlikely causes:")
		for _, c := range d.Causes {
			b.WriteString("\n  - " + c)
		}
	}
	return b.String()
}

// ErrGame wraps an error of the game itself (Init refused the config, a trap
// in a module) during a check.
var ErrGame = errors.New("sdktest: the game failed")

// Check plays the match of o on target several ways and compares them (see
// the package documentation). It returns a *Divergence when runs disagree, an
// error wrapping ErrGame when the game fails, and a summary otherwise.
func Check(target Target, o Options) (Report, error) {
	meta := target.Meta()
	if err := meta.Validate(); err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrGame, err)
	}
	if o.Ticks <= 0 {
		o.Ticks = 300
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 10
	}
	script := o.Script
	if script == nil {
		script = RandomScript(o.Seed, o.Players, meta.MaxPlayers, o.Input)
	}
	c := &checker{target: target, meta: meta, o: o, rep: Report{Name: meta.Name}}
	c.events = make([][]byte, o.Ticks+1)
	for t := 1; t <= o.Ticks; t++ {
		c.events[t] = abi.AppendEvents(nil, script(t))
	}
	ref, err := c.play(run{name: "straight"})
	if err != nil {
		return c.rep, err
	}
	c.ref = ref
	c.rep.Ticks = int64(len(ref.hashes) - 1)
	c.rep.Ended = ref.ended
	c.rep.Hash = ref.hashes[len(ref.hashes)-1]
	var views1 []uint64
	for _, r := range []run{
		{name: "rerun"},
		{name: "views", views: true},
		{name: "checkpoint", checkpoint: true},
		{name: "views", views: true, second: true},
		{name: "checkpoint", checkpoint: true, second: true},
	} {
		got, err := c.play(r)
		if err != nil {
			return c.rep, err
		}
		if r.views && !r.second {
			views1 = got.views
		}
		if r.views && r.second {
			for t := range min(len(views1), len(got.views)) {
				if views1[t] != got.views[t] {
					return c.rep, &Divergence{Run: "views", Tick: int64(t),
						What:   "two runs from the same seed drew different views (the state hashes agree)",
						Causes: []string{CauseMapOrder, CauseHostTime, CauseUninitBuffer}}
				}
			}
		}
	}
	c.rep.Runs = 6
	return c.rep, nil
}

type run struct {
	name       string
	views      bool
	checkpoint bool
	second     bool // the second pass: checkpoints at other ticks
}

type result struct {
	hashes []uint64 // after Init (0) and after every tick
	views  []uint64 // per tick, a hash of every view and frame
	ended  bool
}

type checker struct {
	target Target
	meta   abi.Meta
	o      Options
	events [][]byte
	ref    *result
	rep    Report
}

func (c *checker) gameErr(r run, tick int64, what string, err error) error {
	return fmt.Errorf("%w: %s run, tick %d: %s: %w", ErrGame, r.name, tick, what, err)
}

// compare checks the hash of tick against the reference run's.
func (c *checker) compare(r run, tick int64, h uint64, causes []string, what string) error {
	if c.ref == nil || tick >= int64(len(c.ref.hashes)) {
		return nil
	}
	if want := c.ref.hashes[tick]; h != want {
		if what == "" {
			what = fmt.Sprintf("state hash %016x, but %016x in the straight run", h, want)
		}
		return &Divergence{Run: r.name, Tick: tick, What: what, Causes: causes}
	}
	return nil
}

func (c *checker) causes(r run) []string {
	switch {
	case r.views:
		cs := []string{CauseViewMutates}
		if c.meta.SnapshotFormat != "" {
			cs = append(cs, CauseRenderMutates)
		}
		return cs
	case r.checkpoint:
		return []string{CauseSaveLoad, CauseGlobals}
	}
	return []string{CauseMapOrder, CauseHostTime, CauseGlobals}
}

func (c *checker) play(r run) (res *result, err error) {
	inst, err := c.target.Start()
	if err != nil {
		return nil, c.gameErr(r, 0, "start", err)
	}
	defer func() {
		if inst != nil {
			inst.Close()
		}
	}()
	if err := inst.Init(c.o.Seed, c.o.Config); err != nil {
		return nil, c.gameErr(r, 0, "Init", err)
	}
	var fresh Renderer // a renderer where Init never ran
	if r.views && c.meta.SnapshotFormat != "" {
		rr, err := c.startRenderer()
		if err != nil {
			return nil, c.gameErr(r, 0, "start a renderer", err)
		}
		defer rr.Close()
		fresh = rr
	}
	res = &result{}
	causes := c.causes(r)
	record := func(tick int64) error {
		h, err := inst.StateHash()
		if err != nil {
			return c.gameErr(r, tick, "StateHash", err)
		}
		if c.ref == nil { // the reference run also checks that StateHash is stable
			h2, err := inst.StateHash()
			if err != nil {
				return c.gameErr(r, tick, "StateHash", err)
			}
			if h2 != h {
				return &Divergence{Run: "statehash", Tick: tick,
					What:   fmt.Sprintf("StateHash returned %016x and then %016x for the same state", h, h2),
					Causes: []string{CauseMapOrder, CauseHostTime, CauseHashMutates}}
			}
		}
		res.hashes = append(res.hashes, h)
		return c.compare(r, tick, h, causes, "")
	}
	if err := record(0); err != nil {
		return nil, err
	}
	phase := 0
	if r.second {
		phase = c.o.CheckpointEvery / 2
	}
	for t := 1; t <= c.o.Ticks; t++ {
		tick := int64(t)
		ended, err := inst.Step(c.events[t])
		if err != nil {
			return nil, c.gameErr(r, tick, "Step", err)
		}
		if r.views {
			vh, err := c.views(r, inst, fresh, tick)
			if err != nil {
				return nil, err
			}
			res.views = append(res.views, vh)
		}
		if err := record(tick); err != nil {
			return nil, err
		}
		if r.checkpoint && (t+phase)%c.o.CheckpointEvery == 0 && !ended {
			next, err := c.roundTrip(r, inst, tick)
			if err != nil {
				return nil, err
			}
			if next != nil {
				inst.Close()
				inst = next
			}
		}
		if c.ref != nil && ended != (tick == int64(len(c.ref.hashes)-1) && c.ref.ended) {
			return nil, &Divergence{Run: r.name, Tick: tick, Causes: causes,
				What: fmt.Sprintf("the match ended=%v, unlike in the straight run", ended)}
		}
		if ended {
			res.ended = true
			break
		}
	}
	return res, nil
}

// views calls View for every slot and the spectator, renders snapshots, and
// returns a hash of all the bytes.
func (c *checker) views(r run, inst Instance, fresh Renderer, tick int64) (uint64, error) {
	h := sdk.NewHash()
	own, _ := inst.(Renderer)
	for slot := -1; slot < c.meta.MaxPlayers; slot++ {
		v, err := inst.View(slot)
		if err != nil {
			return 0, c.gameErr(r, tick, fmt.Sprintf("View(%d)", slot), err)
		}
		c.rep.Views++
		h = h.Uint64(uint64(len(v))).Bytes(v)
		if fresh == nil {
			continue
		}
		v = append([]byte(nil), v...) // it may alias the instance's buffer
		f, err := fresh.Render(v)
		if err != nil {
			return 0, c.gameErr(r, tick, fmt.Sprintf("Render of View(%d)", slot), err)
		}
		if err := c.checkFrame(f); err != nil {
			return 0, c.gameErr(r, tick, fmt.Sprintf("Render of View(%d)", slot), err)
		}
		c.rep.Frames++
		h = h.Bytes(f)
		if own == nil {
			continue
		}
		f = append([]byte(nil), f...)
		g, err := own.Render(v)
		if err != nil {
			return 0, c.gameErr(r, tick, fmt.Sprintf("Render of View(%d)", slot), err)
		}
		c.rep.Frames++
		if string(g) != string(f) {
			return 0, &Divergence{Run: "render", Tick: tick,
				What:   fmt.Sprintf("Render drew View(%d) differently on the match's game and on a game where Init never ran", slot),
				Causes: []string{CauseRenderReadsState}}
		}
	}
	return h.Sum(), nil
}

func (c *checker) checkFrame(f []byte) error {
	w, hh, _, _, err := abi.ParseIndexed8(f)
	if err != nil {
		return err
	}
	if w != c.meta.ViewWidth || hh != c.meta.ViewHeight {
		return fmt.Errorf("drew a %dx%d frame; the game declares %dx%d views", w, hh, c.meta.ViewWidth, c.meta.ViewHeight)
	}
	return nil
}

// roundTrip saves inst's state after tick and loads it into a fresh instance,
// which it returns (nil when the game has no checkpoints).
func (c *checker) roundTrip(r run, inst Instance, tick int64) (Instance, error) {
	b, err := inst.Save()
	if err != nil {
		return nil, c.gameErr(r, tick, "Save", err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	b = append([]byte(nil), b...)
	h, err := inst.StateHash()
	if err != nil {
		return nil, c.gameErr(r, tick, "StateHash", err)
	}
	if err := c.compare(r, tick, h, []string{"Save changed game state"}, ""); err != nil {
		return nil, err
	}
	next, err := c.target.Start()
	if err != nil {
		return nil, c.gameErr(r, tick, "start", err)
	}
	if err := next.Init(c.o.Seed, c.o.Config); err != nil {
		next.Close()
		return nil, c.gameErr(r, tick, "Init", err)
	}
	if err := next.Load(tick, b); err != nil {
		next.Close()
		return nil, c.gameErr(r, tick, "Load of the game's own checkpoint", err)
	}
	c.rep.Checkpoints++
	h, err = next.StateHash()
	if err != nil {
		next.Close()
		return nil, c.gameErr(r, tick, "StateHash after Load", err)
	}
	if want := c.ref.hashes[tick]; h != want {
		next.Close()
		return nil, &Divergence{Run: r.name, Tick: tick, Causes: []string{CauseSaveLoad},
			What: fmt.Sprintf("right after Load of a %d-byte checkpoint the state hash is %016x, but %016x in the straight run",
				len(b), h, want)}
	}
	return next, nil
}
