package arena

import "testing"

func BenchmarkStep8Bots(b *testing.B) {
	cfg := Config{Bots: 8, ScoreLimit: DefaultScoreLimit, TimeLimitS: DefaultTimeLimitS}
	g := New()
	g.st.reset(1, cfg)
	b.ReportAllocs()
	seed := uint64(1)
	for b.Loop() {
		if g.Step() {
			// Start another match so that we never time a finished one.
			seed++
			g.st.reset(seed, cfg)
		}
	}
}

// BenchmarkView renders a first-person view (walls, floor, sprites, HUD).
func BenchmarkView(b *testing.B) {
	g := newMatch(b, 1, `{"bots":8}`)
	stepN(g, 100)
	b.ReportAllocs()
	slot := 0
	for b.Loop() {
		g.View(slot)
		slot = (slot + 1) % MaxPlayers
	}
}

func BenchmarkViewSpectator(b *testing.B) {
	g := newMatch(b, 1, `{"bots":8}`)
	stepN(g, 100)
	b.ReportAllocs()
	for b.Loop() {
		g.View(-1)
	}
}

func BenchmarkStateHash(b *testing.B) {
	g := newMatch(b, 1, `{"bots":8}`)
	stepN(g, 100)
	b.ReportAllocs()
	for b.Loop() {
		g.StateHash()
	}
}
