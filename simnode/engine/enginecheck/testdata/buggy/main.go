//go:build wasip1

// Command buggy is a game module for the tests of enginecheck and `ludus ctl
// module check`: a small deterministic game that its config can break on
// purpose. {"bug":"view"}: View changes the state (counts frames in a hashed
// field); {"bug":"save"}: Save drops the held inputs, which only show later.
// Built by the tests, not by games/build.sh.
package main

import (
	"encoding/binary"
	"errors"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

type game struct {
	bug   string
	tick  uint64
	rng   sdk.Rand
	on    [4]bool
	x     [4]int32
	keys  [4]byte
	score uint64
	buf   []byte
}

func (g *game) Meta() abi.Meta {
	return abi.Meta{Name: "buggy", TickRate: 20, MaxPlayers: 4, FrameDivisor: 1, ViewFormat: "buggy-v1"}
}

func (g *game) Init(seed uint64, config []byte) error {
	*g = game{rng: sdk.NewRand(seed), buf: g.buf}
	return sdk.ConfigFields(config, func(k string, v sdk.JSONValue) error {
		if k == "bug" {
			s, err := v.Str()
			g.bug = s
			return err
		}
		return nil
	})
}

func (g *game) Join(slot int, _ string) { g.on[slot], g.x[slot] = true, int32(g.rng.Intn(64)) }
func (g *game) Leave(slot int)          { g.on[slot], g.keys[slot] = false, 0 }
func (g *game) Input(slot int, p []byte) {
	if len(p) == 1 {
		g.keys[slot] = p[0]
	}
}

func (g *game) Step() bool {
	g.tick++
	for s := range g.on {
		if g.on[s] {
			g.x[s] += int32(g.keys[s]&3) - 1
			if g.x[s]%5 == 0 {
				g.score++
			}
		}
	}
	return false
}

func (g *game) View(slot int) []byte {
	if g.bug == "view" {
		g.score++
	}
	g.buf = g.buf[:0]
	for _, x := range g.x {
		g.buf = binary.LittleEndian.AppendUint32(g.buf, uint32(x))
	}
	return append(g.buf, byte(slot))
}

func (g *game) StateHash() uint64 {
	h := sdk.NewHash().Uint64(g.tick).Uint64(g.rng.State()).Uint64(g.score)
	for _, x := range g.x {
		h = h.Uint32(uint32(x))
	}
	return h.Sum()
}

func (g *game) Result() abi.Result { return abi.Result{Ticks: int64(g.tick), Winner: -1} }

func (g *game) Save() []byte {
	b := binary.LittleEndian.AppendUint64(nil, g.tick)
	b = binary.LittleEndian.AppendUint64(b, g.rng.State())
	b = binary.LittleEndian.AppendUint64(b, g.score)
	for s := range g.x {
		k := g.keys[s]
		if g.bug == "save" {
			k = 0
		}
		b = append(b, boolByte(g.on[s]), k)
		b = binary.LittleEndian.AppendUint32(b, uint32(g.x[s]))
	}
	return b
}

func (g *game) Load(b []byte) error {
	if len(b) != 24+4*6 {
		return errors.New("bad checkpoint")
	}
	g.tick = binary.LittleEndian.Uint64(b)
	g.rng.SetState(binary.LittleEndian.Uint64(b[8:]))
	g.score = binary.LittleEndian.Uint64(b[16:])
	for s := range g.x {
		e := b[24+6*s:]
		g.on[s], g.keys[s], g.x[s] = e[0] == 1, e[1], int32(binary.LittleEndian.Uint32(e[2:]))
	}
	return nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func init() { sdk.Register(&game{}) }

func main() {}
