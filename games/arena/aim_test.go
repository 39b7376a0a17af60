package arena

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"ludus.dev/ludus/sdk"
)

// aimInput is a mouse-look payload as a page sends it: the held buttons, then
// the running aim total and the pointer lock it counts from.
func aimInput(buttons uint8, total int32, lock uint16) []byte {
	b := []byte{buttons}
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	return binary.LittleEndian.AppendUint16(b, lock)
}

// aimMatch is a match with one human in slot 0 and no bots, at a known spot.
func aimMatch(t *testing.T) (*Game, *player) {
	t.Helper()
	g := newMatch(t, 7, "")
	g.Join(0, "ada")
	p := &g.st.players[0]
	p.x, p.y, p.angle = cellCenter(9), cellCenter(9), 0
	return g, p
}

// turned is how far the angle moved from before to after, in (-half, half].
func turned(before, after sdk.Angle) int32 { return int32(int16(after - before)) }

// TestAimTurnsAtTurnSpeed: mouse look turns the player by exactly the aim's
// change, never more than turnSpeed in a tick, in both directions; the first
// aim of a lock only sets the reference.
func TestAimTurnsAtTurnSpeed(t *testing.T) {
	for _, want := range []int32{5000, -5000, 799, -1} {
		g, p := aimMatch(t)
		g.Input(0, aimInput(0, 100, 9)) // the lock's first aim: no turn
		g.Step()
		if p.angle != 0 || p.aimOwed != 0 {
			t.Fatalf("the first aim of a lock turned the player to %d (owed %d)", p.angle, p.aimOwed)
		}
		g.Input(0, aimInput(0, 100+want, 9))
		start := p.angle
		for tick := 0; tick < 20; tick++ {
			before := p.angle
			g.Step()
			if d := turned(before, p.angle); d > int32(turnSpeed) || d < -int32(turnSpeed) {
				t.Fatalf("aim %+d: turned %d in one tick, more than turnSpeed %d", want, d, turnSpeed)
			}
		}
		if got := turned(start, p.angle); got != want || p.aimOwed != 0 {
			t.Fatalf("aim %+d: turned %d in total, %d still owed", want, got, p.aimOwed)
		}
	}
	// The number of ticks it takes is the keys' rate: 5000 is six full steps
	// and a rest.
	g, p := aimMatch(t)
	g.Input(0, aimInput(0, 0, 1))
	g.Input(0, aimInput(0, 5000, 1))
	for tick := 1; tick <= 6; tick++ {
		g.Step()
		if p.angle != sdk.Angle(tick)*turnSpeed {
			t.Fatalf("tick %d: angle %d, want %d", tick, p.angle, sdk.Angle(tick)*turnSpeed)
		}
	}
	g.Step()
	if p.angle != 5000 {
		t.Fatalf("angle %d after the rest, want 5000", p.angle)
	}
}

// TestAimIsATotal: inputs are state, so a page's intermediate aims may be
// superseded and never applied; the turn is the same either way.
func TestAimIsATotal(t *testing.T) {
	every, p1 := aimMatch(t)
	skipped, p2 := aimMatch(t)
	every.Input(0, aimInput(0, -40, 3))
	skipped.Input(0, aimInput(0, -40, 3))
	for _, total := range []int32{100, 900, 400, 2600} {
		every.Input(0, aimInput(0, total, 3))
		every.Step()
	}
	skipped.Input(0, aimInput(0, 2600, 3)) // only the last one arrived
	stepN(skipped, 4)
	stepN(every, 10)
	stepN(skipped, 10)
	if p1.angle != p2.angle || p1.angle != 2640 {
		t.Fatalf("angles %d (every aim) and %d (the last one), want 2640 both", p1.angle, p2.angle)
	}
	if every.StateHash() != skipped.StateHash() {
		t.Fatal("the same final aim gives different states")
	}

	// The total may wrap around int32 like the page's counter.
	g, p := aimMatch(t)
	g.Input(0, aimInput(0, 1<<31-100, 5))
	g.Input(0, aimInput(0, -(1<<31)+100, 5)) // +200 through the wrap
	stepN(g, 3)
	if p.angle != 200 {
		t.Fatalf("angle %d after an aim that wrapped around, want 200", p.angle)
	}
}

// TestAimLocks: a new lock (a page that locked again, or reloaded) starts a
// new count instead of turning by the difference of two unrelated totals; an
// input without aim ends mouse look but the turn already owed is paid off.
func TestAimLocks(t *testing.T) {
	g, p := aimMatch(t)
	g.Input(0, aimInput(0, 0, 1))
	g.Input(0, aimInput(0, 30000, 1))
	g.Input(0, aimInput(0, 0, 2)) // a new lock: the total restarts at 0
	stepN(g, 60)
	if p.angle != 30000 {
		t.Fatalf("angle %d, want 30000: the new lock's first aim must only set its reference", p.angle)
	}

	g.Input(0, aimInput(0, 800, 2))
	g.Input(0, []byte{BtnForward}) // keys only: mouse look ends
	if p.aimOn || p.aimLock != 0 || p.aimLast != 0 || p.aimOwed != 800 {
		t.Fatalf("after a key input: on %v lock %d last %d owed %d", p.aimOn, p.aimLock, p.aimLast, p.aimOwed)
	}
	g.Step()
	if p.angle != 30800 {
		t.Fatalf("angle %d, want the owed turn paid off (30800)", p.angle)
	}
	g.Input(0, aimInput(0, 5000, 2)) // the same lock id again, after mouse look ended
	stepN(g, 10)
	if p.angle != 30800 {
		t.Fatalf("angle %d: the first aim after mouse look ended turned the player", p.angle)
	}

	// A fast flick owes at most half a turn.
	g.Input(0, aimInput(0, 5000+3*65536, 2))
	if p.aimOwed != maxAimOwed {
		t.Fatalf("owed %d after a flick of three turns, want %d", p.aimOwed, maxAimOwed)
	}
}

// TestAimSharesTheTurnBudget: keys and mouse together turn no faster than
// turnSpeed a tick; each still gets its whole turn in the end.
func TestAimSharesTheTurnBudget(t *testing.T) {
	for _, c := range []struct {
		key  uint8
		aim  int32
		want int32 // heading after 30 ticks: keys' turn plus the aim
	}{
		{BtnTurnRight, 3000, 30*int32(turnSpeed) + 3000},
		{BtnTurnLeft, 3000, -30*int32(turnSpeed) + 3000},
		{BtnTurnLeft | BtnTurnRight, -3000, -3000},
	} {
		g, p := aimMatch(t)
		g.Input(0, aimInput(c.key, 0, 4))
		g.Input(0, aimInput(c.key, c.aim, 4))
		var sum int32
		for range 30 {
			before := p.angle
			g.Step()
			d := turned(before, p.angle)
			if d > int32(turnSpeed) || d < -int32(turnSpeed) {
				t.Fatalf("keys %#x, aim %d: turned %d in one tick", c.key, c.aim, d)
			}
			sum += d
		}
		g.Input(0, aimInput(0, c.aim, 4))
		for range 10 {
			before := p.angle
			g.Step()
			sum += turned(before, p.angle)
		}
		if sum != c.want || p.aimOwed != 0 {
			t.Fatalf("keys %#x, aim %d: turned %d, want %d (owed %d)", c.key, c.aim, sum, c.want, p.aimOwed)
		}
	}
}

// TestAimAndDeath: a dead player owes nothing and its mouse moves while dead
// do not turn it after the respawn, which faces the spawn point's way; the
// lock's count goes on.
func TestAimAndDeath(t *testing.T) {
	g, _ := aimMatch(t)
	g.Join(1, "bob")
	q := &g.st.players[1]
	q.x, q.y, q.angle = cellCenter(12), cellCenter(9), 0
	total := int32(0)
	g.Input(1, aimInput(0, total, 6))
	g.Input(0, []byte{BtnFire}) // ada faces bob
	for i := 0; i < 10*fireCooldown && q.alive; i++ {
		total += 2 * int32(turnSpeed) // bob's mouse runs ahead of his turning
		g.Input(1, aimInput(0, total, 6))
		g.Step()
	}
	if q.alive {
		t.Fatal("bob survived")
	}
	if q.aimOwed != 0 {
		t.Fatalf("a dead player owes %d", q.aimOwed)
	}
	g.Input(0, []byte{0})
	g.Input(1, aimInput(0, total+9000, 6)) // moves while dead
	if q.aimOwed != 0 || q.aimLast != total+9000 {
		t.Fatalf("while dead: owed %d, last %d", q.aimOwed, q.aimLast)
	}
	stepN(g, respawnTicks)
	if !q.alive {
		t.Fatal("bob did not respawn")
	}
	spawned := q.angle
	stepN(g, 5)
	if q.angle != spawned {
		t.Fatalf("bob turned from his spawn heading %d to %d without moving the mouse", spawned, q.angle)
	}
	g.Input(1, aimInput(0, total+9100, 6))
	g.Step()
	if d := turned(spawned, q.angle); d != 100 {
		t.Fatalf("after respawn, +100 of aim turned bob by %d", d)
	}
}

// TestAimDeterminism: two games fed the same mouse-look inputs stay
// identical, through a checkpoint too; the checkpoint carries the aim state.
func TestAimDeterminism(t *testing.T) {
	a := newMatch(t, 77, `{"bots":4,"score_limit":1000}`)
	b := newMatch(t, 77, `{"bots":4,"score_limit":1000}`)
	r := rand.New(rand.NewPCG(1, 9))
	var total int32
	step := func(g *Game, ev []byte) bool { return sdk.StepEvents(g, ev) }
	seat := events(join(0, "ada"), join(1, "bob"))
	step(a, seat)
	step(b, seat)
	feed := func(tick int) []byte {
		total += int32(r.IntN(4001) - 2000)
		lock := uint16(1 + tick/300) // a new lock now and then
		in := aimInput(uint8(r.IntN(128)), total, lock)
		if tick%97 == 0 {
			in = in[:1] // keys only for a moment
		}
		return events(input(0, in...), input(1, byte(r.IntN(128))))
	}
	for tick := 1; tick <= 1500; tick++ {
		ev := feed(tick)
		if step(a, ev) != step(b, ev) || a.StateHash() != b.StateHash() {
			t.Fatalf("tick %d: the games differ", tick)
		}
		if tick == 700 {
			ck := a.Save()
			if len(ck) > ckptMaxBytes || !a.st.players[0].aimOn {
				t.Fatalf("checkpoint of %d bytes, mouse look on: %v", len(ck), a.st.players[0].aimOn)
			}
			c := New()
			if err := c.Load(ck); err != nil {
				t.Fatal(err)
			}
			if c.StateHash() != a.StateHash() || !bytes.Equal(c.Save(), ck) {
				t.Fatal("the aim state did not survive a checkpoint")
			}
			b = c
		}
	}
	if a.st.players[0].aimLast == 0 && a.st.players[0].aimOwed == 0 {
		t.Fatal("the script never used mouse look")
	}
}

// TestAimCheckpoint: aim records appear only for players using mouse look
// (so a game without any has the checkpoint it always had), and Load
// refuses aim records no game could hold.
func TestAimCheckpoint(t *testing.T) {
	g, p := aimMatch(t)
	g.Join(3, "carl")
	keys := g.Save()
	if want := ckptMinBytes + len("ada") + len("carl"); len(keys) != want {
		t.Fatalf("a game without mouse look saves %d bytes, want %d (no aim records)", len(keys), want)
	}
	g.Input(0, aimInput(0, 10, 77))
	g.Input(0, aimInput(0, 3010, 77))
	g.Input(3, aimInput(0, 5, 78))
	ck := g.Save()
	if len(ck) != len(keys)+2*ckptAim {
		t.Fatalf("checkpoint of %d bytes, want %d: one aim record for each of two players", len(ck), len(keys)+2*ckptAim)
	}
	h := New()
	if err := h.Load(ck); err != nil {
		t.Fatal(err)
	}
	if q := h.st.players[0]; !q.aimOn || q.aimLock != 77 || q.aimLast != 3010 || q.aimOwed != 3000 {
		t.Fatalf("loaded aim: %+v", q)
	}
	// Paid off and switched off: no record any more.
	g.Input(0, []byte{0})
	g.Input(3, []byte{0})
	stepN(g, 5)
	if n := len(g.Save()); n != len(keys) || p.aimOwed != 0 {
		t.Fatalf("after mouse look ended: %d bytes, owed %d", n, p.aimOwed)
	}

	rec0 := len(keys)
	corrupt := func(off int, v ...byte) []byte {
		c := append([]byte(nil), ck...)
		copy(c[off:], v)
		return c
	}
	le := binary.LittleEndian
	owed := func(v int32) []byte { return le.AppendUint32(nil, uint32(v)) }
	bad := map[string][]byte{
		"truncated record":     ck[:len(ck)-1],
		"slot out of range":    corrupt(rec0, MaxPlayers),
		"slots out of order":   corrupt(rec0+ckptAim, 0),
		"an empty slot":        corrupt(rec0, 1),
		"on is not a bool":     corrupt(rec0+1, 2),
		"off with a lock":      corrupt(rec0+1, 0),
		"owed over half":       corrupt(rec0+8, owed(maxAimOwed+1)...),
		"owed under -half":     corrupt(rec0+8, owed(-maxAimOwed-1)...),
		"all zero":             append(append([]byte(nil), keys...), make([]byte, ckptAim)...),
		"a record for a bot":   nil,
		"owed by a dead human": nil,
	}
	bots := newMatch(t, 1, `{"bots":1}`)
	bad["a record for a bot"] = append(bots.Save(), MaxPlayers-1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	g.Input(0, aimInput(0, 0, 1))
	g.Input(0, aimInput(0, 100, 1))
	dead := g.Save()
	dead[ckptHeader] &^= flagAlive // slot 0 is the first player record
	dead[ckptHeader+12] = 0        // health 0, as a dead player has
	bad["owed by a dead human"] = dead
	h = New()
	before := h.StateHash()
	for name, b := range bad {
		if err := h.Load(b); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
		if h.StateHash() != before {
			t.Fatalf("%s: a failed Load changed the state", name)
		}
	}
	// The same dead player without the owed turn loads: the check above is
	// about the aim, not the player.
	g.Input(0, aimInput(0, 100, 1))
	g.Step()
	dead = g.Save()
	dead[ckptHeader] &^= flagAlive
	dead[ckptHeader+12] = 0
	if err := h.Load(dead); err != nil {
		t.Fatalf("a dead player with mouse look on and nothing owed: %v", err)
	}
}

// TestBotsIgnoreAim: bots steer through applyInput with one byte, so they
// never have aim state.
func TestBotsIgnoreAim(t *testing.T) {
	g := newMatch(t, 5, `{"bots":8}`)
	g.Input(7, aimInput(BtnFire, 1000, 1)) // inputs for bots are ignored
	stepN(g, 500)
	for i := range g.st.players {
		if p := &g.st.players[i]; p.aimOn || p.aimLock != 0 || p.aimLast != 0 || p.aimOwed != 0 {
			t.Fatalf("bot %d has aim state %+v", i, *p)
		}
	}
}
