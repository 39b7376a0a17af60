package arena

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/views.golden from the current renderer")

// The golden files hold, per sampled tick of goldenScript, SHA-256 prefixes of
// the frame of the spectator and of every slot.
//
// views.golden is what the arena draws now; rewrite it with -update after a
// deliberate change to the pictures.
//
// views-nofeedback.golden is never rewritten: the frames the arena drew before
// combat feedback (issue 16), which were those of the arena before views were
// split into snapshots and a renderer. Every frame drawn from a snapshot whose
// feedback fields are zeroed must still match it, so feedback only ever adds
// its overlays.
const (
	goldenPath           = "testdata/views.golden"
	goldenNoFeedbackPath = "testdata/views-nofeedback.golden"
)

// goldenFrame is the indexed8 frame a client of slot sees.
func goldenFrame(g *Game, slot int) []byte { return g.Frame(slot) }

// goldenScript plays the scripted matches of the golden test and calls fn
// with every sampled tick. Scenario 1: five bots and three humans (one with a
// long non-ASCII name, one leaving and another joining its slot), random held
// buttons, then a forced score-limit win by a human. Scenario 2: eight bots
// until the time limit.
func goldenScript(t testing.TB, fn func(scenario, tick int, g *Game)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	g := newMatch(t, 424242, `{"bots":5,"score_limit":30,"time_limit_s":60}`)
	for tick := 1; tick <= 440; tick++ {
		var evs []abi.Event
		switch tick {
		case 1:
			evs = append(evs, join(0, "ada"), join(1, "Zoë «the» Ünïcödé Wärrior"), join(2, "carl"))
		case 120:
			evs = append(evs, leave(2))
		case 200:
			evs = append(evs, join(2, "dora"))
		}
		if tick%9 == 0 {
			for slot := uint8(0); slot < 3; slot++ {
				m := byte(rng.IntN(128))
				if slot == 0 {
					m |= BtnFire
				}
				evs = append(evs, input(slot, m))
			}
		}
		if tick == 400 {
			g.st.players[1].kills = g.st.scoreLimit // the next Step ends the match
		}
		sdk.StepEvents(g, events(evs...))
		if tick%4 == 0 {
			fn(1, tick, g)
		}
	}
	g = newMatch(t, 99, `{"bots":8,"time_limit_s":5}`)
	for tick := 1; tick <= 200; tick++ {
		g.Step()
		if tick%10 == 0 {
			fn(2, tick, g)
		}
	}
}

// TestGoldenViews: the frames clients see (the renderer applied to every
// slot's snapshot) are byte-identical to testdata/views.golden.
func TestGoldenViews(t *testing.T) {
	checkGolden(t, goldenPath, *updateGolden, goldenFrame)
}

// keyInputsDigest is the SHA-256 of goldenScript's state hashes, checkpoints and
// snapshots at every sampled tick, recorded before mouse look existed (issue
// 16). The script sends one-byte inputs only, so it must never change: mouse
// look adds state (checkpoint.go's aim records) only for players who use it.
// A deliberate change to the game's rules or its state rewrites it.
const keyInputsDigest = "d21b3d3ebe282cd48e4ccab2de4ce92cd68c6248bb2692b4f07a62835ab0b432"

// TestGoldenKeyInputs: replays of key inputs give the states, checkpoints and
// snapshots they gave before mouse look.
func TestGoldenKeyInputs(t *testing.T) {
	h := sha256.New()
	goldenScript(t, func(scenario, tick int, g *Game) {
		fmt.Fprintf(h, "%d %d %x ", scenario, tick, g.StateHash())
		h.Write(g.Save())
		for slot := abi.SpectatorSlot; slot < MaxPlayers; slot++ {
			h.Write(g.View(slot))
		}
	})
	if got := hex.EncodeToString(h.Sum(nil)); got != keyInputsDigest {
		t.Fatalf("a replay of key inputs digests to %s, want %s", got, keyInputsDigest)
	}
}

// TestGoldenViewsWithoutFeedback: without the combat feedback fields, every
// frame is the one drawn before they existed (views-nofeedback.golden); and
// the script does show feedback, so views.golden pins its drawing.
func TestGoldenViewsWithoutFeedback(t *testing.T) {
	checkGolden(t, goldenNoFeedbackPath, false, func(g *Game, slot int) []byte {
		return g.Render(withoutFeedback(g.View(slot)))
	})
	var hits, arrows, feeds int
	goldenScript(t, func(_, _ int, g *Game) {
		for slot := range MaxPlayers {
			if v := g.View(slot); len(v) == SnapshotPlayerSize {
				hits += min(int(v[snapHit]), 1)
				arrows += min(int(v[snapDmg]), 1)
				feeds += min(int(v[snapFeed]), 1)
			}
		}
	})
	t.Logf("sampled player snapshots with a hit marker: %d, a damage arrow: %d, a kill feed: %d", hits, arrows, feeds)
	if hits == 0 || arrows == 0 || feeds == 0 {
		t.Fatal("the golden script does not show every kind of combat feedback")
	}
}

// withoutFeedback returns a copy of a snapshot with the combat feedback
// fields of a player snapshot zeroed.
func withoutFeedback(snap []byte) []byte {
	out := append([]byte(nil), snap...)
	if len(out) == SnapshotPlayerSize && out[4] == snapKindPlayer {
		out[snapHit], out[snapDmg], out[snapDmgFrom] = 0, 0, 0
		clear(out[snapFeed : snapFeed+feedLen*snapKillSize])
	}
	return out
}

// checkGolden compares the frames frame draws over goldenScript with the
// golden file at path, after rewriting it when update is set.
func checkGolden(t *testing.T, path string, update bool, frame func(g *Game, slot int) []byte) {
	t.Helper()
	var lines []string
	goldenScript(t, func(scenario, tick int, g *Game) {
		line := fmt.Sprintf("%d %d", scenario, tick)
		for slot := abi.SpectatorSlot; slot < MaxPlayers; slot++ {
			sum := sha256.Sum256(frame(g, slot))
			line += " " + hex.EncodeToString(sum[:12])
		}
		lines = append(lines, line)
	})
	if update {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want = append(want, sc.Text())
	}
	if len(want) != len(lines) {
		t.Fatalf("%s has %d samples, the script %d", path, len(want), len(lines))
	}
	bad := 0
	for i := range lines {
		if lines[i] == want[i] {
			continue
		}
		g, w := strings.Fields(lines[i]), strings.Fields(want[i])
		for k := 2; k < len(g) && k < len(w); k++ {
			if g[k] != w[k] && bad < 20 {
				t.Errorf("scenario %s tick %s slot %d: frame differs from %s", g[0], g[1], k-3, path)
				bad++
			}
		}
	}
}
