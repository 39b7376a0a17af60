// Package arenatrace renders the scripted arena trace the frame codec is measured
// and tested on (`ludus bench stream`): the native arena game with three bots,
// one player standing, then walking, then turning, its view taken every
// frame_divisor ticks (17.5 frames/s). The same script always gives the same
// frames.
package arenatrace

import (
	"time"

	"ludus.dev/ludus/games/arena"
)

// Script is how long each phase lasts.
type Script struct {
	Standing, Walking, Turning time.Duration
}

// Bench is the script of `ludus bench stream`: 60 s in all.
var Bench = Script{Standing: 10 * time.Second, Walking: 20 * time.Second, Turning: 30 * time.Second}

// Seed is the match seed of the trace.
const Seed = 20260801

// Arena input bits.
const (
	fwd       = 1 << 0
	turnLeft  = 1 << 2
	turnRight = 1 << 3
)

// FramesPerSecond of the trace.
const FramesPerSecond = float64(arena.TickRate) / arena.FrameDivisor

// Run plays the script and calls fn with every view (slot 0's frame, every
// frame_divisor ticks); the view is valid only during the call. It stops
// early if fn returns false.
func Run(s Script, fn func(tick int64, view []byte) bool) error {
	return Play(s, func(tick int64, g *arena.Game) bool {
		return tick%arena.FrameDivisor != 0 || fn(tick, g.Frame(0))
	})
}

// Play plays the script and calls fn after every tick with the game (slot 0
// is the scripted player), for callers that want more than its views, such as
// its snapshots. It stops early if fn returns false.
func Play(s Script, fn func(tick int64, g *arena.Game) bool) error {
	g := arena.New()
	if err := g.Init(Seed, []byte(`{"bots":3,"score_limit":1000,"time_limit_s":3600}`)); err != nil {
		return err
	}
	g.Join(0, "p")
	ticks := func(d time.Duration) int64 { return int64(d.Seconds() * arena.TickRate) }
	walkEnd := ticks(s.Standing) + ticks(s.Walking)
	end := walkEnd + ticks(s.Turning)
	last := byte(0xff)
	for tick := int64(1); tick <= end; tick++ {
		var mask byte
		switch {
		case tick <= ticks(s.Standing):
		case tick <= walkEnd:
			// Walk, veering right for 0.4 s every 2 s so walls do not stop us.
			mask = fwd
			if (tick-ticks(s.Standing))%(2*arena.TickRate) < arena.TickRate*4/10 {
				mask |= turnRight
			}
		default:
			mask = turnLeft
		}
		if mask != last {
			g.Input(0, []byte{mask})
			last = mask
		}
		g.Step()
		if !fn(tick, g) {
			return nil
		}
	}
	return nil
}

// Frames returns copies of all the views of the script.
func Frames(s Script) (ticks []int64, views [][]byte, err error) {
	err = Run(s, func(tick int64, view []byte) bool {
		ticks = append(ticks, tick)
		views = append(views, append([]byte(nil), view...))
		return true
	})
	return ticks, views, err
}
