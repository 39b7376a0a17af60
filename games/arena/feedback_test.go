package arena

import (
	"bytes"
	"flag"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/sdk/sdktest"
)

var screenshot = flag.Bool("screenshot", false, "write artifacts/arena-feedback.png (TestFeedbackScreenshot)")

// duel seats "ada" in slot 0 at cell (9, 9) facing +x and "bob" in slot 1
// three cells ahead of her, facing her.
func duel(t *testing.T) *Game {
	t.Helper()
	g := newMatch(t, 1, "")
	g.Join(0, "ada")
	g.Join(1, "bob")
	place(g, 0, 9, 9, 0)
	place(g, 1, 12, 9, 180)
	return g
}

// TestCombatFeedback follows a duel through the snapshots: the shooter's hit
// marker for hitMarkerTicks, the victim's damage arrow pointing back at the
// shooter for damageDirTicks, then the kill in both players' kill feeds for
// killFeedTicks.
func TestCombatFeedback(t *testing.T) {
	g := duel(t)
	a, b := &g.st.players[0], &g.st.players[1]
	g.Input(0, []byte{BtnFire})
	g.Step()
	g.Input(0, []byte{0})
	if b.health == maxHealth {
		t.Fatal("the first shot missed")
	}
	for left := hitMarkerTicks; left >= 0; left-- {
		if v := g.View(0); v[snapHit] != byte(left) || v[snapDmg] != 0 {
			t.Fatalf("%d ticks after the hit: shooter's hit marker byte %d, arrow %d; want %d, 0", hitMarkerTicks-left, v[snapHit], v[snapDmg], left)
		}
		if v := g.View(1); v[snapDmg] != byte(max(left+damageDirTicks-hitMarkerTicks, 0)) || v[snapDmgFrom] != 128 || v[snapHit] != 0 {
			t.Fatalf("%d ticks after the hit: victim's arrow %d bearing %d (want 128: the shooter is towards -x)", hitMarkerTicks-left, v[snapDmg], v[snapDmgFrom])
		}
		g.Step()
	}
	stepN(g, damageDirTicks-hitMarkerTicks-2)
	if v := g.View(1); v[snapDmg] != 1 {
		t.Fatalf("arrow byte %d on its last tick", v[snapDmg])
	}
	g.Step()
	if v := g.View(1); v[snapDmg] != 0 || v[snapDmgFrom] != 0 {
		t.Fatalf("arrow bytes %d %d after a second", v[snapDmg], v[snapDmgFrom])
	}

	g.Input(0, []byte{BtnFire})
	for b.alive {
		g.Step()
	}
	g.Input(0, []byte{0})
	killTick := g.st.tick
	if v := g.View(0); v[snapHit] != hitMarkerTicks|snapHitKill {
		t.Fatalf("the fatal hit's marker byte %#x", v[snapHit])
	}
	want := make([]byte, feedLen*snapKillSize)
	want[0], want[1] = 1, 1
	copy(want[2:], "ada")
	copy(want[2+feedNameLen:], "bob")
	for g.st.tick < killTick+killFeedTicks {
		for slot := range 2 {
			if v := g.View(slot); !bytes.Equal(v[snapFeed:snapFlags], want) {
				t.Fatalf("tick %d, slot %d: kill feed % x, want % x", g.st.tick-killTick, slot, v[snapFeed:snapFlags], want)
			}
		}
		g.Step()
	}
	if v := g.View(0); !bytes.Equal(v[snapFeed:snapFlags], make([]byte, len(want))) {
		t.Fatalf("the kill is still in the feed after %d ticks", killFeedTicks)
	}
	if a.kills != 1 || g.st.feed[0].tick != killTick {
		t.Fatal("the kill was not recorded once")
	}
}

// TestKillFeedOrder: the feed keeps the feedLen newest kills, newest first,
// with the names the players had when they died, even after a slot changes
// hands.
func TestKillFeedOrder(t *testing.T) {
	g := newMatch(t, 1, "")
	names := []string{"ada", "bob", "carol", "dave", "erin", "Ünïcödé Wärrior"}
	for i, n := range names {
		g.Join(i, n)
	}
	for v := 1; v < len(names); v++ {
		g.st.tick += 10
		g.st.recordHit(0, v, true)
	}
	g.Leave(5)
	g.Join(5, "frank")
	snap := g.View(0)
	for n := 0; n < feedLen; n++ {
		e := snap[snapFeed+n*snapKillSize:]
		victim := len(names) - 1 - n
		wantName := names[victim]
		if victim == 5 {
			wantName = "?n?c?d? " // as drawn: each non-ASCII character is one '?'
		}
		if e[0] != 1 || int(e[1]) != victim || string(cstr(e[2:2+feedNameLen])) != "ada" ||
			string(cstr(e[2+feedNameLen:2+2*feedNameLen])) != wantName[:min(len(wantName), feedNameLen)] {
			t.Fatalf("entry %d: % x, want ada killing %q (slot %d)", n, e[:snapKillSize], wantName, victim)
		}
	}
}

func TestBearing(t *testing.T) {
	one := sdk.FixedOne
	for _, c := range []struct {
		dx, dy sdk.Fixed
		want   uint8
	}{
		{one, 0, 0}, {one, one, 32}, {0, one, 64}, {-one, one, 96}, {-one, 0, 128},
		{-one, -one, 160}, {0, -one, 192}, {one, -one, 224}, {3 * one, one / 100, 0}, {0, 0, 0},
	} {
		x, y := sdk.FixedInt(5), sdk.FixedInt(7)
		if got := bearing(x, y, x+c.dx, y+c.dy); got != c.want {
			t.Errorf("bearing to (%d, %d) = %d, want %d", c.dx, c.dy, got, c.want)
		}
	}
}

// arrowPixels renders snap with and without a damage arrow (bearing from,
// left ticks) and returns how many pixels the arrow drew and their centroid.
func arrowPixels(t *testing.T, snap []byte, from uint8, left byte) (n, cx, cy int) {
	t.Helper()
	r := NewRenderer()
	without := append([]byte(nil), r.Render(withoutFeedback(snap))...)
	with := withoutFeedback(snap)
	with[snapDmg], with[snapDmgFrom] = left, from
	f := r.Render(with)[abi.Indexed8HeaderSize:]
	for i, p := range f {
		if p != without[abi.Indexed8HeaderSize+i] {
			n++
			cx += i % ViewWidth
			cy += i / ViewWidth
		}
	}
	if n == 0 {
		return 0, -1, -1
	}
	return n, cx / n, cy / n
}

// TestDamageArrowDirection: the arrow sits at the screen edge the shooter is
// towards, relative to where the viewer faces, and fades (fewer pixels) as
// its second runs out.
func TestDamageArrowDirection(t *testing.T) {
	g := duel(t)
	const facing = 0x3A00 // any facing: the arrow turns with it
	snap := append([]byte(nil), g.View(0)...)
	le.PutUint16(snap[snapFacing:], facing)
	var full int
	for _, c := range []struct {
		name string
		rel  uint8 // bearing relative to the facing, 256ths of a turn
		ok   func(x, y int) bool
	}{
		{"ahead", 0, func(x, y int) bool { return y < 25 && abs(x-ViewWidth/2) < 6 }},
		{"right", 64, func(x, y int) bool { return x > ViewWidth-25 && abs(y-horizon) < 6 }},
		{"behind", 128, func(x, y int) bool { return y > ViewHeight-25 && abs(x-ViewWidth/2) < 6 }},
		{"left", 192, func(x, y int) bool { return x < 25 && abs(y-horizon) < 6 }},
		{"ahead right", 16, func(x, y int) bool { return y < 25 && x > ViewWidth/2+20 && x < ViewWidth-25 }},
	} {
		n, x, y := arrowPixels(t, snap, c.rel+facing>>8, damageDirTicks)
		if n < 40 || !c.ok(x, y) {
			t.Errorf("%s: %d pixels around (%d, %d)", c.name, n, x, y)
		}
		full = n
	}
	faded, _, _ := arrowPixels(t, snap, facing>>8+16, 5)
	if faded == 0 || faded*3 > full {
		t.Errorf("with 5 of %d ticks left the arrow draws %d of its %d pixels", damageDirTicks, faded, full)
	}
}

// TestSDKCheck runs the SDK's determinism check (sdk/sdktest) on the arena:
// reruns, views and renders every tick, checkpoint round trips. The match is
// one where players hit each other and die, so the combat feedback is in the
// hashes, checkpoints and snapshots the check compares.
func TestSDKCheck(t *testing.T) {
	o := sdktest.Options{Seed: 7, Players: 2, Ticks: 100, Config: []byte(`{"bots":6}`), CheckpointEvery: 10}
	rep := sdktest.Run(t, func() sdk.Game { return New() }, o)
	if rep.Checkpoints == 0 || rep.Frames == 0 || rep.Ticks != int64(o.Ticks) {
		t.Fatalf("report %+v: want checkpoints and frames over %d ticks", rep, o.Ticks)
	}
	// The same match natively: count the feedback the check went through.
	g := newMatch(t, o.Seed, string(o.Config))
	script := sdktest.RandomScript(o.Seed, o.Players, MaxPlayers, nil)
	var hits, kills int
	for tick := 1; tick <= o.Ticks; tick++ {
		sdk.StepEvents(g, events(script(tick)...))
		for i := range g.st.players {
			if g.st.players[i].hitTick == g.st.tick {
				hits++
			}
		}
		if g.st.feed[0].tick == g.st.tick {
			kills++
		}
	}
	t.Logf("%d hits and at least %d kills in the checked match", hits, kills)
	if hits == 0 || kills == 0 {
		t.Fatal("the checked match has no hits or no kills: pick another seed")
	}
}

// feedbackScene is a player's view with all three kinds of feedback: ada
// (slot 0) has just hit bob, who stands in front of her; BOT 7, to her right,
// has just hit her; and the feed lists three kills, one of them hers.
func feedbackScene(t *testing.T) *Game {
	g := newMatch(t, 1, `{"bots":2}`)
	g.Join(0, "ada")
	g.Join(1, "bob")
	g.Join(2, "Zoë")
	place(g, 0, 9, 9, 0)
	place(g, 1, 12, 9, 180)
	place(g, 7, 9, 12, 270)
	s := &g.st
	s.tick = 300
	s.recordHit(7, 2, true)
	s.tick += 40
	s.recordHit(0, 6, true)
	s.tick += 30
	s.recordHit(1, 7, true)
	s.tick += 20
	s.recordHit(0, 1, false)
	s.recordHit(7, 0, false)
	s.players[0].hurt = hurtTicks
	s.players[0].health = 66
	s.players[0].kills = 1
	s.tick += 3
	s.players[0].hurt -= 3
	return g
}

// TestFeedbackScreenshot draws the feedback scene in pixels, checks that each
// overlay is where it belongs, and with -screenshot writes it to
// artifacts/arena-feedback.png in the arena's palette.
func TestFeedbackScreenshot(t *testing.T) {
	g := feedbackScene(t)
	snap := append([]byte(nil), g.View(0)...)
	if snap[snapHit] == 0 || snap[snapDmg] == 0 || snap[snapFeed+2*snapKillSize] == 0 {
		t.Fatalf("the scene lacks feedback: % x", snap)
	}
	frame := append([]byte(nil), g.Render(snap)...)
	plain := g.Render(withoutFeedback(snap))
	var crosshair, rightEdge, feed int
	for i := abi.Indexed8HeaderSize; i < len(frame); i++ {
		if frame[i] == plain[i] {
			continue
		}
		x, y := (i-abi.Indexed8HeaderSize)%ViewWidth, (i-abi.Indexed8HeaderSize)/ViewWidth
		switch {
		case abs(x-ViewWidth/2) <= 8 && abs(y-horizon) <= 8:
			crosshair++
		case x >= ViewWidth-30 && abs(y-horizon) <= 20:
			rightEdge++
		case x >= ViewWidth/2 && y >= feedTop-2 && y < feedTop+3*feedLine:
			feed++
		default:
			t.Errorf("feedback drew at (%d, %d), outside its three places", x, y)
		}
	}
	if crosshair < 20 || rightEdge < 40 || feed < 200 {
		t.Errorf("pixels drawn: %d by the hit marker, %d by the arrow, %d by the kill feed", crosshair, rightEdge, feed)
	}
	if !*screenshot {
		return
	}
	w, h, pal, pix, err := abi.ParseIndexed8(frame)
	if err != nil {
		t.Fatal(err)
	}
	cp := make(color.Palette, 256)
	for i := range cp {
		cp[i] = color.RGBA{pal[3*i], pal[3*i+1], pal[3*i+2], 255}
	}
	img := image.NewPaletted(image.Rect(0, 0, w, h), cp)
	copy(img.Pix, pix)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("..", "..", "artifacts", "arena-feedback.png")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}
