package sdktest_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/density"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/sdk/sdktest"
)

// toy is a small 4-player game with checkpoints (and, with snap, snapshot
// views and a renderer). bug selects one way of breaking determinism.
type toy struct {
	bug  string
	snap bool

	tick  int64
	rng   sdk.Rand
	on    [4]bool
	x     [4]int32
	keys  [4]byte // held input; not in the state hash, so a lost one shows later
	score int64
	seat  map[int]int // slot -> join order, for the map bugs
	buf   []byte
}

// leaked is package state a "globals" toy keeps across matches.
var leaked int64

func newToy(bug string, snap bool) func() sdk.Game {
	return func() sdk.Game { return &toy{bug: bug, snap: snap} }
}

func (g *toy) Meta() abi.Meta {
	m := abi.Meta{Name: "toy", TickRate: 20, MaxPlayers: 4, FrameDivisor: 1, ViewFormat: "toy-v1"}
	if g.snap {
		m.ViewFormat, m.ViewWidth, m.ViewHeight, m.SnapshotFormat = abi.Indexed8Format, 8, 4, "toy-snap-v1"
	}
	return m
}

func (g *toy) Init(seed uint64, config []byte) error {
	if string(config) == "bad" {
		return errors.New("bad config")
	}
	*g = toy{bug: g.bug, snap: g.snap, rng: sdk.NewRand(seed), seat: map[int]int{}}
	return nil
}

func (g *toy) Join(slot int, _ string) {
	g.on[slot], g.x[slot] = true, int32(g.rng.Intn(100))
	g.seat[slot] = len(g.seat)
}

func (g *toy) Leave(slot int) {
	g.on[slot], g.keys[slot] = false, 0
	delete(g.seat, slot)
}

func (g *toy) Input(slot int, p []byte) {
	if len(p) == 1 {
		g.keys[slot] = p[0]
	}
}

func (g *toy) Step() bool {
	g.tick++
	for s := range g.on {
		if g.on[s] {
			g.x[s] += int32(g.keys[s]&3) - 1
			if g.x[s]%7 == 0 {
				g.score += int64(s + 1)
			}
		}
	}
	switch g.bug {
	case "map-order":
		i := int64(0)
		for s := range g.seat { // the order decides who gets which bonus
			i++
			g.x[s] += int32(i)
		}
	case "time":
		g.score += time.Now().UnixNano()
	case "globals":
		leaked++
		g.score += leaked
	}
	return false
}

func (g *toy) View(slot int) []byte {
	if g.bug == "view-mutates" && slot == abi.SpectatorSlot {
		g.score++ // e.g. a "frames drawn" counter that ends up hashed
	}
	g.buf = g.buf[:0]
	for s := range g.x {
		g.buf = binary.LittleEndian.AppendUint32(g.buf, uint32(g.x[s]))
	}
	return append(g.buf, byte(slot))
}

func (g *toy) Render(snap []byte) []byte {
	f := make([]byte, abi.Indexed8HeaderSize+8*4)
	var pal [768]byte
	px := abi.Indexed8Header(f, 8, 4, &pal)
	copy(px, snap)
	switch g.bug {
	case "render-reads-state":
		px[0] = byte(g.tick)
	case "render-mutates":
		g.score++
	}
	return f
}

func (g *toy) StateHash() uint64 {
	h := sdk.NewHash().Uint64(uint64(g.tick)).Uint64(g.rng.State()).Uint64(uint64(g.score))
	for s := range g.x {
		h = h.Uint32(uint32(g.x[s]))
	}
	if g.bug == "hash-map" {
		for s, order := range g.seat {
			h = h.Uint32(uint32(s)).Uint32(uint32(order))
		}
	}
	return h.Sum()
}

func (g *toy) Result() abi.Result { return abi.Result{Ticks: g.tick, Winner: -1} }

func (g *toy) Save() []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(g.tick))
	b = binary.LittleEndian.AppendUint64(b, g.rng.State())
	b = binary.LittleEndian.AppendUint64(b, uint64(g.score))
	for s := range g.x {
		b = append(b, boolByte(g.on[s]))
		b = binary.LittleEndian.AppendUint32(b, uint32(g.x[s]))
		if g.bug != "save-drops-keys" {
			b = append(b, g.keys[s])
		} else {
			b = append(b, 0)
		}
	}
	if g.bug == "save-drops-score" {
		binary.LittleEndian.PutUint64(b[16:], 0)
	}
	return b
}

func (g *toy) Load(b []byte) error {
	if len(b) != 24+4*6 {
		return errors.New("bad checkpoint")
	}
	g.tick = int64(binary.LittleEndian.Uint64(b))
	g.rng.SetState(binary.LittleEndian.Uint64(b[8:]))
	g.score = int64(binary.LittleEndian.Uint64(b[16:]))
	clear(g.seat)
	for s := range g.x {
		e := b[24+6*s:]
		g.on[s], g.x[s], g.keys[s] = e[0] == 1, int32(binary.LittleEndian.Uint32(e[1:])), e[5]
		if g.on[s] {
			g.seat[s] = len(g.seat)
		}
	}
	return nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// fakeTB records what Run reports instead of failing the test.
type fakeTB struct{ fatal []any }

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Log(...any)        {}
func (f *fakeTB) Fatal(args ...any) { f.fatal = args }

func TestRealGamesPass(t *testing.T) {
	for _, c := range []struct {
		name string
		new  func() sdk.Game
		o    sdktest.Options
	}{
		{"toy", newToy("", false), sdktest.Options{Seed: 3, Players: 4}},
		{"toy with snapshots", newToy("", true), sdktest.Options{Seed: 3, Players: 2}},
		{"arena with bots", func() sdk.Game { return arena.New() },
			sdktest.Options{Seed: 7, Players: 3, Ticks: 100, Config: []byte(`{"bots":2}`), CheckpointEvery: 25}},
		{"density", func() sdk.Game { return density.New() }, sdktest.Options{Seed: 11, Ticks: 200}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := sdktest.Run(t, c.new, c.o)
			if rep.Runs != 6 || rep.Ticks == 0 || rep.Views == 0 {
				t.Errorf("report %+v: want 6 runs of some ticks with views", rep)
			}
		})
	}
}

// TestArenaReport: the arena checkpoints and renders, and the report counts it.
func TestArenaReport(t *testing.T) {
	rep, err := sdktest.Check(sdktest.Game(func() sdk.Game { return arena.New() }),
		sdktest.Options{Seed: 1, Players: 2, Ticks: 40, CheckpointEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	// Two checkpoint runs: ticks 10, 20, 30, 40 and 5, 15, 25, 35.
	if rep.Checkpoints != 8 || rep.Frames == 0 || rep.Ticks != 40 {
		t.Fatalf("report %+v: want 8 checkpoint round trips, frames, 40 ticks", rep)
	}
	if !strings.Contains(rep.String(), "8 checkpoint round trips") {
		t.Errorf("summary %q", rep)
	}
}

func TestBrokenGamesFail(t *testing.T) {
	for _, c := range []struct {
		bug   string
		snap  bool
		run   string // the run that must catch it
		cause string // a cause the message must give
	}{
		{"view-mutates", false, "views", sdktest.CauseViewMutates},
		{"render-mutates", true, "views", sdktest.CauseRenderMutates},
		{"render-reads-state", true, "render", sdktest.CauseRenderReadsState},
		{"save-drops-keys", false, "checkpoint", sdktest.CauseSaveLoad},
		{"save-drops-score", false, "checkpoint", sdktest.CauseSaveLoad},
		{"map-order", false, "rerun", sdktest.CauseMapOrder},
		{"hash-map", false, "statehash", sdktest.CauseMapOrder},
		{"time", false, "rerun", sdktest.CauseHostTime},
		{"globals", false, "rerun", sdktest.CauseGlobals},
	} {
		t.Run(c.bug, func(t *testing.T) {
			_, err := sdktest.Check(sdktest.Game(newToy(c.bug, c.snap)), sdktest.Options{Seed: 5, Players: 4, Ticks: 200})
			var d *sdktest.Divergence
			if !errors.As(err, &d) {
				t.Fatalf("Check = %v; want a Divergence", err)
			}
			if d.Run != c.run {
				t.Errorf("found by the %s run; want %s\n%v", d.Run, c.run, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.cause) || !strings.Contains(msg, "tick ") {
				t.Errorf("message lacks the tick or the cause %q:\n%s", c.cause, msg)
			}
			t.Log(msg)
		})
	}
}

// TestSaveDropFoundAtTheRightTick: a checkpoint that loses the held keys
// diverges only once a key makes a difference; one that loses a hashed field
// diverges right at the round trip.
func TestSaveDropTicks(t *testing.T) {
	_, err := sdktest.Check(sdktest.Game(newToy("save-drops-score", false)),
		sdktest.Options{Seed: 5, Players: 4, CheckpointEvery: 13})
	var d *sdktest.Divergence
	if !errors.As(err, &d) || d.Tick != 13 || !strings.Contains(d.What, "right after Load") {
		t.Fatalf("Check = %v; want a divergence right after the Load at tick 13", err)
	}
}

func TestRunFails(t *testing.T) {
	tb := &fakeTB{}
	sdktest.Run(tb, newToy("view-mutates", false), sdktest.Options{})
	if len(tb.fatal) != 1 || !strings.Contains(tb.fatal[0].(error).Error(), sdktest.CauseViewMutates) {
		t.Fatalf("Run reported %v", tb.fatal)
	}
}

func TestGameErrors(t *testing.T) {
	_, err := sdktest.Check(sdktest.Game(newToy("", false)), sdktest.Options{Config: []byte("bad")})
	if !errors.Is(err, sdktest.ErrGame) || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("bad config: %v", err)
	}
	_, err = sdktest.Check(sdktest.Game(func() sdk.Game { return &panicky{toy: toy{}} }), sdktest.Options{Players: 1})
	if !errors.Is(err, sdktest.ErrGame) || !strings.Contains(err.Error(), "panic: boom") {
		t.Errorf("panicking game: %v", err)
	}
}

type panicky struct{ toy }

func (p *panicky) Step() bool {
	if p.tick == 3 {
		panic("boom")
	}
	return p.toy.Step()
}

func TestRandomScript(t *testing.T) {
	play := func(seed uint64) [][]abi.Event {
		s := sdktest.RandomScript(seed, 3, 4, nil)
		var out [][]abi.Event
		for tick := 1; tick <= 500; tick++ {
			out = append(out, s(tick))
		}
		return out
	}
	a, b := play(9), play(9)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("RandomScript is not a function of its arguments")
	}
	if reflect.DeepEqual(a, play(10)) {
		t.Fatal("RandomScript ignores its seed")
	}
	kinds := map[abi.EventKind]int{}
	seated := map[uint8]bool{}
	for i, evs := range a {
		for _, ev := range evs {
			kinds[ev.Kind]++
			switch ev.Kind {
			case abi.EventJoin:
				if seated[ev.Slot] {
					t.Fatalf("tick %d: slot %d joins twice", i+1, ev.Slot)
				}
				seated[ev.Slot] = true
			case abi.EventLeave:
				delete(seated, ev.Slot)
			case abi.EventInput:
				if !seated[ev.Slot] {
					t.Fatalf("tick %d: input for empty slot %d", i+1, ev.Slot)
				}
			}
			if ev.Slot >= 4 {
				t.Fatalf("slot %d", ev.Slot)
			}
		}
	}
	if kinds[abi.EventJoin] < 4 || kinds[abi.EventLeave] < 1 || kinds[abi.EventInput] < 500 {
		t.Errorf("500 ticks of 3 players: %v; want joins, leaves and inputs", kinds)
	}
}
