package arena

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// entry returns the bytes of slot j's entry in a player snapshot.
func entry(snap []byte, j int) []byte {
	return snap[snapEnts+j*snapEntSize : snapEnts+(j+1)*snapEntSize]
}

// place puts player i at the centre of cell (cx, cy), facing deg degrees.
func place(g *Game, i, cx, cy, deg int) {
	p := &g.st.players[i]
	p.x, p.y, p.angle = cellCenter(cx), cellCenter(cy), sdk.AngleDegrees(deg)
}

// TestHiddenEnemyNotInSnapshot: an enemy behind a wall is not in the
// viewer's snapshot (the spectator's has it); the same enemy in the open in
// front of the viewer is; one behind the viewer is not.
func TestHiddenEnemyNotInSnapshot(t *testing.T) {
	g := newMatch(t, 1, "")
	g.Join(0, "viewer")
	g.Join(1, "enemy")
	// Row 10 of the map has a metal block at cell (4, 10); row 9 is open
	// from wall to wall.
	if tileAt(4, 10) == tileOpen || tileAt(3, 10) != tileOpen || tileAt(6, 10) != tileOpen {
		t.Fatal("the map changed: pick other cells for this test")
	}
	for cx := 1; cx < mapW-1; cx++ {
		if tileAt(cx, 9) != tileOpen {
			t.Fatal("the map changed: row 9 is no longer open")
		}
	}
	cases := []struct {
		name         string
		vx, vy, vdeg int
		ex, ey       int
		want         bool // the enemy is in the snapshot
		wantOnScreen bool // the enemy is in the field of view (walls aside)
	}{
		{"behind a wall", 1, 10, 0, 6, 10, false, true},
		{"in front of the wall", 1, 10, 0, 3, 10, true, true},
		{"in the open", 1, 9, 0, 6, 9, true, true},
		{"behind the viewer", 6, 9, 0, 1, 9, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			place(g, 0, c.vx, c.vy, c.vdeg)
			place(g, 1, c.ex, c.ey, 0)
			snap := append([]byte(nil), g.View(0)...)
			e := entry(snap, 1)
			if got := e[0]&entVisible != 0; got != c.want {
				t.Fatalf("enemy in the snapshot: %v, want %v (entry % x)", got, c.want, e)
			}
			if !c.want && !bytes.Equal(e, make([]byte, snapEntSize)) {
				t.Fatalf("a hidden enemy leaves data in the snapshot: % x", e)
			}
			v, e1 := &g.st.players[0], &g.st.players[1]
			cam := newCamera(v.x, v.y, v.angle)
			if got := onScreen(&cam, e1.x, e1.y); got != c.wantOnScreen {
				t.Fatalf("enemy in the field of view: %v, want %v", got, c.wantOnScreen)
			}
			// Drawn, the visible enemy shows; the hidden one would not have.
			with := append([]byte(nil), g.Render(allOthers(g, 0, snap))...)
			without := append([]byte(nil), g.Render(withoutOthers(snap))...)
			if drawn := !bytes.Equal(with, without); drawn != c.want {
				t.Fatalf("enemy drawn: %v, want %v", drawn, c.want)
			}
			if spec := g.View(abi.SpectatorSlot); spec[specEnts+specEntSize]&entActive == 0 {
				t.Fatal("the spectator snapshot lacks the enemy")
			}
		})
	}
}

// onScreen reports whether a sprite at (x, y) covers a screen column of cam,
// walls aside.
func onScreen(cam *camera, x, y sdk.Fixed) bool {
	d := cam.depthOf(x, y)
	if d == 0 {
		return false
	}
	_, ok := cam.billboardAt(x, y, d)
	return ok
}

// allOthers returns a copy of viewer's player snapshot with every other
// player in the match in it, visible or not: what the snapshot would be
// without interest management.
func allOthers(g *Game, viewer int, snap []byte) []byte {
	out := append([]byte(nil), snap...)
	for j := range g.st.players {
		q := &g.st.players[j]
		if j == viewer || !q.active {
			continue
		}
		e := entry(out, j)
		e[0] = entVisible
		if q.alive {
			e[0] |= entAlive
		}
		le.PutUint32(e[1:], uint32(q.x))
		le.PutUint32(e[5:], uint32(q.y))
	}
	return out
}

func withoutOthers(snap []byte) []byte {
	out := append([]byte(nil), snap...)
	clear(out[snapEnts:])
	return out
}

// TestInterestManagementIsInvisible: over the golden script, drawing every
// player's snapshot gives exactly the frame drawn with every other player
// included, so the line-of-sight culling never removes a sprite pixel; and it
// does remove players that are on screen but behind walls.
func TestInterestManagementIsInvisible(t *testing.T) {
	var kept, culledBehindWalls, culledOffScreen int
	goldenScript(t, func(_, _ int, g *Game) {
		for i := range g.st.players {
			p := &g.st.players[i]
			if !p.active {
				continue
			}
			snap := append([]byte(nil), g.View(i)...)
			got := append([]byte(nil), g.Render(snap)...)
			if want := g.Render(allOthers(g, i, snap)); !bytes.Equal(got, want) {
				t.Fatalf("tick %d slot %d: culling changed the frame", g.st.tick, i)
			}
			cam := newCamera(p.x, p.y, p.angle)
			for j := range g.st.players {
				q := &g.st.players[j]
				if j == i || !q.active {
					continue
				}
				if entry(snap, j)[0]&entVisible != 0 {
					kept++
					continue
				}
				if onScreen(&cam, q.x, q.y) {
					culledBehindWalls++
				} else {
					culledOffScreen++
				}
			}
		}
	})
	t.Logf("other players: %d in snapshots, %d culled behind walls, %d off screen", kept, culledBehindWalls, culledOffScreen)
	if kept == 0 || culledBehindWalls == 0 || culledOffScreen == 0 {
		t.Fatal("the script does not exercise every case of the culling")
	}
}

// TestSnapshotLayout: fixed sizes, the magic and kind, zeroed unused entries,
// and a snapshot that does not change when nothing moves.
func TestSnapshotLayout(t *testing.T) {
	g := newMatch(t, 3, `{"bots":2}`)
	g.Join(0, "ada")
	stepN(g, 50)
	p := g.View(0)
	if len(p) != SnapshotPlayerSize || string(p[:4]) != snapMagic || p[4] != snapKindPlayer || p[5] != 0 {
		t.Fatalf("player snapshot % x", p)
	}
	for _, j := range []int{0, 1, 2, 3, 4, 5} { // self and empty slots
		if e := entry(p, j); !bytes.Equal(e, make([]byte, snapEntSize)) {
			t.Fatalf("entry %d is not zero: % x", j, e)
		}
	}
	s := g.View(abi.SpectatorSlot)
	if len(s) != SnapshotSpectatorSize || string(s[:4]) != snapMagic || s[4] != snapKindSpectator {
		t.Fatalf("spectator snapshot % x", s)
	}
	if e := s[specEnts+specEntSize : specEnts+6*specEntSize]; !bytes.Equal(e, make([]byte, len(e))) {
		t.Fatal("empty slots are not zero in the spectator snapshot")
	}
	if got := string(cstr(s[specEnts+24 : specEnts+24+specNameLen])); got != "ada" || s[specEnts+6*specEntSize] == 0 {
		t.Fatalf("name in the spectator snapshot %q", got)
	}
	if v := g.View(5); len(v) != SnapshotSpectatorSize {
		t.Fatal("an empty slot does not get the spectator snapshot")
	}
	if SnapshotPlayerSize != 196 || SnapshotSpectatorSize != 288 {
		t.Fatalf("sizes %d and %d differ from the layout documented in snapshot.go", SnapshotPlayerSize, SnapshotSpectatorSize)
	}
}

// TestPutName: names are stored as the font draws them.
func TestPutName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ada", "ada"},
		{"Zoë «the» Ünïcödé Wärrior", "Zo? ?the? "},
		{"a\x00b", "a?b"},
		{"0123456789abc", "0123456789"},
	} {
		var dst [specNameLen]byte
		putName(dst[:], c.in)
		if got := string(cstr(dst[:])); got != c.want {
			t.Errorf("putName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRenderWithoutInit: a renderer that never saw a match (a fresh Game, as
// in a module where ludus_init was never called, or a bare Renderer) draws a
// snapshot exactly like the game that took it.
func TestRenderWithoutInit(t *testing.T) {
	g := newMatch(t, 5, `{"bots":8}`)
	stepN(g, 300)
	fresh, bare := New(), NewRenderer()
	for slot := abi.SpectatorSlot; slot < MaxPlayers; slot++ {
		snap := append([]byte(nil), g.View(slot)...)
		want := append([]byte(nil), g.Render(snap)...)
		if !bytes.Equal(fresh.Render(snap), want) || !bytes.Equal(bare.Render(snap), want) {
			t.Fatalf("slot %d: a fresh renderer draws another frame", slot)
		}
	}
	if fresh.StateHash() != New().StateHash() {
		t.Fatal("Render changed the state of the game it was called on")
	}
}

// TestRenderMalformed: bytes that are not a snapshot draw the error frame;
// damaged snapshots of the right size draw something; nothing panics.
func TestRenderMalformed(t *testing.T) {
	g := newMatch(t, 5, `{"bots":8}`)
	stepN(g, 100)
	bad := append([]byte(nil), NewRenderer().Render(nil)...)
	player := append([]byte(nil), g.View(7)...)
	spec := append([]byte(nil), g.View(abi.SpectatorSlot)...)
	withByte := func(b []byte, i int, v byte) []byte {
		b = append([]byte(nil), b...)
		b[i] = v
		return b
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"magic only":     []byte(snapMagic),
		"truncated":      player[:len(player)-1],
		"too long":       append(append([]byte(nil), spec...), 0),
		"bad magic":      withByte(player, 0, 'X'),
		"unknown kind":   withByte(player, 4, 9),
		"kinds swapped":  withByte(spec, 4, snapKindPlayer),
		"slot too large": withByte(player, 5, MaxPlayers),
		"indexed8 frame": bad,
	} {
		if got := NewRenderer().Render(b); !bytes.Equal(got, bad) {
			t.Errorf("%s: not the error frame", name)
		}
	}
	r := NewRenderer()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		b := append([]byte(nil), player...)
		if i%2 == 1 {
			b = append(b[:0], spec...)
		}
		for k := rng.IntN(12); k >= 0; k-- {
			b[5+rng.IntN(len(b)-5)] = byte(rng.Uint32())
		}
		if _, _, _, _, err := abi.ParseIndexed8(r.Render(b)); err != nil {
			t.Fatal(err)
		}
	}
	// All ones: every flag set, every number at its maximum.
	for _, b := range [][]byte{player, spec} {
		b = append([]byte(nil), b...)
		for i := 5; i < len(b); i++ {
			b[i] = 0xFF
		}
		b[5] = 3 // a valid slot for player snapshots
		if _, _, _, _, err := abi.ParseIndexed8(r.Render(b)); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzRender: the renderer takes any bytes (snapshots come from the network)
// and always returns a 320×200 indexed8 frame.
func FuzzRender(f *testing.F) {
	g := newMatch(f, 5, `{"bots":8}`)
	stepN(g, 100)
	for _, slot := range []int{abi.SpectatorSlot, 0, 7} {
		f.Add(append([]byte(nil), g.View(slot)...))
	}
	f.Add([]byte{})
	f.Add([]byte(snapMagic + "\x01"))
	r := NewRenderer()
	f.Fuzz(func(t *testing.T, b []byte) {
		w, h, _, _, err := abi.ParseIndexed8(r.Render(b))
		if err != nil || w != ViewWidth || h != ViewHeight {
			t.Fatalf("%dx%d, %v", w, h, err)
		}
	})
}
