//go:build wasip1

// Command talker is a game module for the tests of guest output and errors: a
// trivial game whose config makes it talk or fail. {"fail":"TEXT"}: Init
// returns an error with TEXT; {"say":N}: every N ticks it prints "tick T" to
// stdout (and "warn T" to stderr every 2N); {"spam":N}: N lines of 100 bytes
// every tick; {"panic_at":T}: it panics at tick T; {"view":true}: View
// changes the state (a desync on replay); {"view_bytes":N}: views of N
// bytes. Built by the tests, not by games/build.sh.
package main

import (
	"errors"
	"os"
	"strconv"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

type game struct {
	tick, say, spam, panicAt, viewed, viewBytes uint64
	view                                        bool
}

func (g *game) Meta() abi.Meta {
	return abi.Meta{Name: "talker", TickRate: 50, MaxPlayers: 2, FrameDivisor: 1, ViewFormat: "talker-v1"}
}

func (g *game) Init(seed uint64, config []byte) error {
	*g = game{}
	return sdk.ConfigFields(config, func(k string, v sdk.JSONValue) error {
		switch k {
		case "fail":
			s, err := v.Str()
			if err != nil {
				return err
			}
			return errors.New(s)
		case "say", "spam", "panic_at", "view_bytes":
			n, err := v.Int()
			switch k {
			case "say":
				g.say = uint64(n)
			case "spam":
				g.spam = uint64(n)
			case "view_bytes":
				g.viewBytes = uint64(n)
			default:
				g.panicAt = uint64(n)
			}
			return err
		case "view":
			b, err := v.Bool()
			g.view = b
			return err
		}
		return nil
	})
}

func (g *game) Join(int, string)   {}
func (g *game) Leave(int)          {}
func (g *game) Input(int, []byte)  {}
func (g *game) Result() abi.Result { return abi.Result{Ticks: int64(g.tick), Winner: -1} }

func (g *game) Step() bool {
	if g.panicAt != 0 && g.tick == g.panicAt {
		panic("talker: boom at tick " + strconv.FormatUint(g.tick, 10))
	}
	if g.say != 0 && g.tick%g.say == 0 {
		os.Stdout.WriteString("tick " + strconv.FormatUint(g.tick, 10) + "\n")
		if g.tick%(2*g.say) == 0 {
			println("warn " + strconv.FormatUint(g.tick, 10)) // stderr
		}
	}
	const line = "spam 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890"
	for range g.spam {
		println(line)
	}
	g.tick++
	return false
}

func (g *game) View(slot int) []byte {
	if g.view {
		g.viewed++
	}
	if g.viewBytes > 0 {
		return make([]byte, g.viewBytes)
	}
	return []byte{byte(slot)}
}

func (g *game) StateHash() uint64 { return sdk.NewHash().Uint64(g.tick).Uint64(g.viewed).Sum() }

func init() { sdk.Register(&game{}) }

func main() {}
