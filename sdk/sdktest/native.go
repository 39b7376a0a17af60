package sdktest

import (
	"errors"
	"fmt"
	"strconv"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// TB is the part of testing.TB that Run uses; *testing.T and *testing.B
// implement it. (The package does not import testing, so that tools can use
// Check.)
type TB interface {
	Helper()
	Fatal(args ...any)
	Log(args ...any)
}

// Run checks the game that newGame makes (see Check) and fails t with the
// divergence, if any. newGame must return a new, independent game every time
// it is called: the check plays many matches, some of them side by side.
func Run(t TB, newGame func() sdk.Game, o Options) Report {
	t.Helper()
	rep, err := Check(Game(newGame), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	return rep
}

// Game returns a Target that runs games natively, as ludus_* exports would:
// events go through sdk.StepEvents, Save and Load through sdk.Checkpointer,
// Render through sdk.Renderer. A panic in the game is returned as an error.
func Game(newGame func() sdk.Game) Target {
	return native{newGame: newGame, meta: newGame().Meta()}
}

type native struct {
	newGame func() sdk.Game
	meta    abi.Meta
}

func (n native) Meta() abi.Meta { return n.meta }

func (n native) Start() (Instance, error) {
	g := n.newGame()
	if g == nil {
		return nil, errors.New("the game constructor returned nil")
	}
	return &nativeInstance{g: g}, nil
}

type nativeInstance struct{ g sdk.Game }

// guard turns a panic of the game into an error, as a trap would be.
func guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("panic: %v", r)
	}
}

func (n *nativeInstance) Init(seed uint64, config []byte) (err error) {
	defer guard(&err)
	return n.g.Init(seed, append([]byte(nil), config...))
}

func (n *nativeInstance) Step(events []byte) (ended bool, err error) {
	defer guard(&err)
	return sdk.StepEvents(n.g, events), nil
}

func (n *nativeInstance) View(slot int) (v []byte, err error) {
	defer guard(&err)
	return n.g.View(slot), nil
}

func (n *nativeInstance) StateHash() (h uint64, err error) {
	defer guard(&err)
	return n.g.StateHash(), nil
}

func (n *nativeInstance) Save() (b []byte, err error) {
	defer guard(&err)
	if cp, ok := n.g.(sdk.Checkpointer); ok {
		return cp.Save(), nil
	}
	return nil, nil
}

func (n *nativeInstance) Load(_ int64, b []byte) (err error) {
	defer guard(&err)
	cp, ok := n.g.(sdk.Checkpointer)
	if !ok {
		return errors.New("the game is not an sdk.Checkpointer")
	}
	return cp.Load(b)
}

// Render draws with the game's Render (an error for games that are not
// sdk.Renderers).
func (n *nativeInstance) Render(snapshot []byte) (f []byte, err error) {
	defer guard(&err)
	r, ok := n.g.(sdk.Renderer)
	if !ok {
		return nil, errors.New("the game is not an sdk.Renderer")
	}
	return r.Render(snapshot), nil
}

func (n *nativeInstance) Close() error { return nil }

// RandomScript returns the default script: players (at least 1, at most
// maxPlayers) join at tick 1 and send an input (input's, or one random byte)
// on about half of the ticks each; now and then one leaves and, a few ticks
// later, joins again, sometimes in another free slot. It is a function of its
// arguments only.
func RandomScript(seed uint64, players, maxPlayers int, input func(r *sdk.Rand, slot int) []byte) Script {
	players = min(max(players, 1), maxPlayers)
	if input == nil {
		input = func(r *sdk.Rand, _ int) []byte { return []byte{byte(r.Uint32())} }
	}
	r := sdk.NewRand(seed ^ 0x5344_4B54_4553_5431) // "SDKTEST1"
	seated := make([]bool, maxPlayers)
	away := 0 // players who left and will come back
	back := 0 // the tick they come back at
	return func(tick int) []abi.Event {
		var evs []abi.Event
		join := func(slot int) {
			seated[slot] = true
			evs = append(evs, abi.Event{Kind: abi.EventJoin, Slot: uint8(slot), Payload: []byte(playerName(slot))})
		}
		if tick == 1 {
			for s := range players {
				join(s)
			}
		}
		if away > 0 && tick >= back {
			free := []int{}
			for s, on := range seated {
				if !on {
					free = append(free, s)
				}
			}
			join(free[r.Intn(len(free))])
			away--
		}
		for s, on := range seated {
			if on && r.Chance(1, 2) {
				evs = append(evs, abi.Event{Kind: abi.EventInput, Slot: uint8(s), Payload: input(&r, s)})
			}
		}
		if tick > 1 && away == 0 && r.Chance(1, 40) {
			s := r.Intn(maxPlayers)
			if seated[s] {
				seated[s] = false
				evs = append(evs, abi.Event{Kind: abi.EventLeave, Slot: uint8(s)})
				away, back = 1, tick+1+r.Intn(10)
			}
		}
		return evs
	}
}

func playerName(slot int) string { return "player" + strconv.Itoa(slot) }
