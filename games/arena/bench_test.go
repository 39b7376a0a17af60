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

// BenchmarkView takes a player's snapshot: the authoritative side of a frame
// (the node's cost per player per frame), line-of-sight culling included.
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

// BenchmarkRender draws players' snapshots (walls, floor, sprites, HUD): the
// client's side of a frame.
func BenchmarkRender(b *testing.B) {
	g := newMatch(b, 1, `{"bots":8}`)
	stepN(g, 100)
	var snaps [][]byte
	for slot := range MaxPlayers {
		snaps = append(snaps, append([]byte(nil), g.View(slot)...))
	}
	r := NewRenderer()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Render(snaps[i%MaxPlayers])
		i++
	}
}

func BenchmarkRenderSpectator(b *testing.B) {
	g := newMatch(b, 1, `{"bots":8}`)
	stepN(g, 100)
	snap := append([]byte(nil), g.View(-1)...)
	r := NewRenderer()
	b.ReportAllocs()
	for b.Loop() {
		r.Render(snap)
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
