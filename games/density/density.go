// Package density is the minimal module of `ludus bench density`, written with
// the Go SDK: every tick at 30 Hz it moves 64 entities (x += vx/30, y += vy/30)
// and bounces them off the walls of a 100×100 box, in integer thousandths of a
// unit. games/density/c/density.c is the same game in C; both compute the same
// states and state hashes. No players; it never ends.
package density

import (
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

const (
	N    = 64
	Box  = 100000 // 100 units, in thousandths
	Rate = 30
)

// Game implements sdk.Game.
type Game struct {
	x, y, vx, vy [N]int32
	tick         int64
	out          []byte
}

func New() *Game { return &Game{} }

func (g *Game) Meta() abi.Meta {
	return abi.Meta{Name: "density", TickRate: Rate, MaxPlayers: 1, FrameDivisor: 30, ViewFormat: "density-v1"}
}

func (g *Game) Init(seed uint64, config []byte) error {
	r := sdk.NewRand(seed)
	for i := 0; i < N; i++ {
		g.x[i] = int32(r.Uint64() % (Box + 1))
		g.y[i] = int32(r.Uint64() % (Box + 1))
		g.vx[i] = int32(r.Uint64()%40001) - 20000
		g.vy[i] = int32(r.Uint64()%40001) - 20000
	}
	g.tick = 0
	return nil
}

func (g *Game) Join(int, string)  {}
func (g *Game) Leave(int)         {}
func (g *Game) Input(int, []byte) {}
func move(p, v *int32) {
	*p += *v / Rate
	if *p < 0 {
		*p, *v = -*p, -*v
	}
	if *p > Box {
		*p, *v = 2*Box-*p, -*v
	}
}

func (g *Game) Step() bool {
	for i := 0; i < N; i++ {
		move(&g.x[i], &g.vx[i])
		move(&g.y[i], &g.vy[i])
	}
	g.tick++
	return false
}

// View is density-v1: 64 × (x, y) as u16 hundredths of a unit, little-endian.
func (g *Game) View(int) []byte {
	g.out = g.out[:0]
	for i := 0; i < N; i++ {
		x, y := uint16(g.x[i]/10), uint16(g.y[i]/10)
		g.out = append(g.out, byte(x), byte(x>>8), byte(y), byte(y>>8))
	}
	return g.out
}

func (g *Game) StateHash() uint64 {
	h := sdk.NewHash()
	for i := 0; i < N; i++ {
		h = h.Uint32(uint32(g.x[i])).Uint32(uint32(g.y[i])).Uint32(uint32(g.vx[i])).Uint32(uint32(g.vy[i]))
	}
	return h.Uint64(uint64(g.tick)).Sum()
}

func (g *Game) Result() abi.Result {
	return abi.Result{Ticks: g.tick, Winner: -1, Players: []abi.PlayerResult{}}
}
