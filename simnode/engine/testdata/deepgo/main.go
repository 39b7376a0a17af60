//go:build wasip1

// Command deepgo is a game module for simnode/engine's stack tests: every step
// recurses through an ordinary Go function as deep as the config says (a
// decimal number of frames), as a tree walk or a flood fill would, and the
// state hash is what it computed. Built by the tests, not by games/build.sh.
package main

import (
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

type game struct {
	depth int
	sum   uint64
}

func (g *game) Meta() abi.Meta {
	return abi.Meta{Name: "deepgo", TickRate: 30, MaxPlayers: 1, FrameDivisor: 30, ViewFormat: "raw"}
}

func (g *game) Init(seed uint64, config []byte) error {
	g.depth, g.sum = 0, seed
	for _, c := range config {
		if c >= '0' && c <= '9' {
			g.depth = g.depth*10 + int(c-'0')
		}
	}
	return nil
}

func (g *game) Join(int, string)  {}
func (g *game) Leave(int)         {}
func (g *game) Input(int, []byte) {}

func (g *game) Step() bool {
	g.sum = walk(g.depth, g.sum)
	return false
}

// walk is a small recursive function with a few locals, like a tree walk's.
//
//go:noinline
func walk(n int, acc uint64) uint64 {
	if n == 0 {
		return acc
	}
	var pad [4]uint64
	pad[n&3] = acc*31 + uint64(n)
	return walk(n-1, pad[0]^pad[1]^pad[2]^pad[3]) + 1
}

func (g *game) View(int) []byte    { return nil }
func (g *game) StateHash() uint64  { return g.sum }
func (g *game) Result() abi.Result { return abi.Result{} }

func init() { sdk.Register(&game{}) }

func main() {}
