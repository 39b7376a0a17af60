package arena

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

func TestMeta(t *testing.T) {
	m := New().Meta()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	want := abi.Meta{Name: "arena", TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "indexed8", ViewWidth: 320, ViewHeight: 200,
		InputKind: "state", SnapshotFormat: "arena-snap-v1", Title: Title, Hint: Hint, Controls: controls, Bots: true}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("Meta() = %+v, want %+v", m, want)
	}
	// The controls are the input bits the game reads, one control per button.
	buttons := []uint8{BtnForward, BtnBack, BtnTurnLeft, BtnTurnRight, BtnStrafeLeft, BtnStrafeRight, BtnFire}
	if len(m.Controls) != len(buttons) {
		t.Fatalf("%d controls for %d buttons", len(m.Controls), len(buttons))
	}
	for i, c := range m.Controls {
		if 1<<c.Bit != int(buttons[i]) || c.Bit > 7 || len(c.Keys) == 0 {
			t.Errorf("control %q: bit %d, want the button %#x", c.Label, c.Bit, buttons[i])
		}
	}
	if abi.InputBytes(m.Controls) != 1 {
		t.Error("the arena's input is one byte")
	}
	// The mouse (mouse look, and its button) fires: a page sends the aim
	// after the button byte (takeAim).
	if fire := m.Controls[len(m.Controls)-1]; fire.Bit != 6 || !slices.Contains(fire.Keys, "Mouse") {
		t.Errorf("the fire control %+v does not ask for the mouse", fire)
	}
}

// TestDeterminism runs two independent games with the same seed and config
// for 5,000 ticks: every state hash and, every 50 ticks, every snapshot and
// the frame drawn from it must match.
func TestDeterminism(t *testing.T) {
	a := newMatch(t, 12345, `{"bots":8,"score_limit":1000,"time_limit_s":1000}`)
	b := newMatch(t, 12345, `{"bots":8,"score_limit":1000,"time_limit_s":1000}`)
	for tick := 1; tick <= 5000; tick++ {
		ea, eb := a.Step(), b.Step()
		if ha, hb := a.StateHash(), b.StateHash(); ha != hb || ea != eb {
			t.Fatalf("tick %d: hashes %x != %x (ended %v, %v)", tick, ha, hb, ea, eb)
		}
		if tick%50 != 0 {
			continue
		}
		for slot := abi.SpectatorSlot; slot < MaxPlayers; slot++ {
			va := append([]byte(nil), a.View(slot)...)
			if vb := b.View(slot); !bytes.Equal(va, vb) {
				t.Fatalf("tick %d: snapshots of slot %d differ", tick, slot)
			}
			fa := append([]byte(nil), a.Render(va)...)
			if fb := b.Frame(slot); !bytes.Equal(fa, fb) {
				t.Fatalf("tick %d: frames of slot %d differ", tick, slot)
			}
		}
	}
	var kills int64
	for _, p := range a.Result().Players {
		kills += p.Kills
	}
	if kills == 0 {
		t.Error("5,000 ticks of 8 bots and nobody was killed")
	}
	t.Logf("%d kills in 5,000 ticks", kills)
}

func TestSeedsDiverge(t *testing.T) {
	a := newMatch(t, 1, `{"bots":8}`)
	b := newMatch(t, 2, `{"bots":8}`)
	stepN(a, 200)
	stepN(b, 200)
	if bytes.Equal(a.View(abi.SpectatorSlot), append([]byte(nil), b.View(abi.SpectatorSlot)...)) {
		t.Fatal("seeds 1 and 2 give the same spectator view after 200 ticks")
	}
	if a.StateHash() == b.StateHash() {
		t.Fatal("seeds 1 and 2 give the same state hash")
	}
}

// TestInputChangesView: a player turning left for a few ticks sees something
// else than an idle one.
func TestInputChangesView(t *testing.T) {
	idle := newMatch(t, 9, "")
	turn := newMatch(t, 9, "")
	sdk.StepEvents(idle, events(join(0, "ada")))
	sdk.StepEvents(turn, events(join(0, "ada"), input(0, BtnTurnLeft)))
	stepN(idle, 5)
	stepN(turn, 5)
	if bytes.Equal(idle.View(0), append([]byte(nil), turn.View(0)...)) {
		t.Fatal("turning left did not change the view")
	}
	if idle.StateHash() == turn.StateHash() {
		t.Fatal("turning left did not change the state")
	}
	if got, want := turn.st.players[0].angle, idle.st.players[0].angle-6*turnSpeed; got != want {
		t.Fatalf("angle after 6 ticks of turning left = %d, want %d", got, want)
	}
}

func TestMovementAndWalls(t *testing.T) {
	g := newMatch(t, 3, "")
	g.Join(0, "ada")
	g.Input(0, []byte{BtnForward | BtnStrafeRight})
	for range 2000 {
		g.Step()
		p := &g.st.players[0]
		if blocked(p.x, p.y) {
			t.Fatalf("tick %d: player inside a wall at (%d, %d)", g.st.tick, p.x, p.y)
		}
	}
}

func TestInputRules(t *testing.T) {
	g := newMatch(t, 5, `{"bots":2}`) // bots in slots 7 and 6
	h := g.StateHash()

	// Inputs for empty, out-of-range and bot slots change nothing; so do
	// empty payloads and joins/leaves out of range.
	g.Input(0, []byte{BtnFire})
	g.Input(-1, []byte{BtnFire})
	g.Input(8, []byte{BtnFire})
	g.Input(7, []byte{BtnFire})
	g.Join(8, "x")
	g.Join(-3, "x")
	g.Leave(3)
	g.Leave(7) // bots cannot be made to leave
	g.Leave(99)
	if g.StateHash() != h {
		t.Fatal("ignored events changed the state")
	}

	g.Join(0, "ada")
	g.Join(0, "mallory") // occupied by a human: ignored
	if g.st.players[0].name != "ada" {
		t.Fatalf("join on an occupied slot renamed the player to %q", g.st.players[0].name)
	}
	h = g.StateHash()
	g.Input(0, nil)
	if g.StateHash() != h {
		t.Fatal("an empty payload changed the state")
	}
	g.Input(0, []byte{BtnForward | 0x80, 0xFF, 0xFF})
	if got := g.st.players[0].input; got != BtnForward {
		t.Fatalf("input = %#x, want only forward (extra bytes and bit 7 ignored)", got)
	}
	g.Step()
	g.Step()
	if got := g.st.players[0].input; got != BtnForward {
		t.Fatalf("input did not persist: %#x", got)
	}

	// A human joining a bot's slot replaces the bot.
	g.Join(7, "bob")
	if p := g.st.players[7]; p.bot || p.name != "bob" || p.kills != 0 {
		t.Fatalf("slot 7 after a human joined: bot=%v name=%q", p.bot, p.name)
	}
	g.Leave(7)
	if g.st.players[7].active {
		t.Fatal("leave did not free the slot")
	}
	g.Join(7, "carol")
	if p := g.st.players[7]; !p.active || p.name != "carol" {
		t.Fatal("a freed slot cannot be joined again")
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ada", "ada"},
		{"  ada\n", "ada"},
		{"", "PLAYER 3"},
		{"\x00\x01", "PLAYER 3"},
		{"\xff\xfeok", "ok"},
		{"ааааааааааааааааааааааа", "аааааааааааааааа"}, // 2-byte runes cut at 32 bytes
	} {
		if got := sanitizeName(c.in, 3); got != c.want {
			t.Errorf("sanitizeName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Config
		err  bool
	}{
		{"", Config{0, 20, 300}, false},
		{"  ", Config{0, 20, 300}, false},
		{"null", Config{0, 20, 300}, false},
		{"{}", Config{0, 20, 300}, false},
		{`{"bots":3,"score_limit":5,"time_limit_s":60}`, Config{3, 5, 60}, false},
		{`{"bots":99,"score_limit":-1,"time_limit_s":0}`, Config{8, 20, 300}, false},
		{`{"bots":-2,"unknown":true}`, Config{0, 20, 300}, false},
		{`{"bots":`, Config{}, true},
		{`{"bots":"many"}`, Config{}, true},
		{`[1,2]`, Config{}, true},
	} {
		got, err := ParseConfig([]byte(c.in))
		if (err != nil) != c.err {
			t.Errorf("ParseConfig(%q) error = %v, want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && got != c.want {
			t.Errorf("ParseConfig(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if err := New().Init(1, []byte("{nope")); err == nil {
		t.Error("Init accepted invalid JSON")
	}
	g := newMatch(t, 1, `{"bots":3}`)
	for slot, bot := range []bool{false, false, false, false, false, true, true, true} {
		if p := g.st.players[slot]; p.active != bot || p.bot != bot {
			t.Errorf("slot %d: active=%v bot=%v, want bots in the highest slots", slot, p.active, p.bot)
		}
	}
}

func TestScoreLimit(t *testing.T) {
	g := newMatch(t, 77, `{"bots":8,"score_limit":5}`)
	ended := false
	for i := 0; i < 300*TickRate && !ended; i++ {
		ended = g.Step()
	}
	if !ended {
		t.Fatalf("no bot reached 5 kills in 300 s: %+v", g.Result())
	}
	r := g.Result()
	if !r.Ended || r.Ticks != g.st.tick || r.Winner < 0 || len(r.Players) != 8 {
		t.Fatalf("result %+v", r)
	}
	best := r.Players[0]
	for _, p := range r.Players {
		if p.Slot == r.Winner {
			best = p
		}
		if p.Score != p.Kills {
			t.Errorf("score %d != kills %d", p.Score, p.Kills)
		}
	}
	if best.Score != 5 {
		t.Fatalf("winner %d has score %d, want 5", r.Winner, best.Score)
	}
	h := g.StateHash()
	if !g.Step() || g.StateHash() != h {
		t.Fatal("Step after the end changed the state or returned false")
	}
	t.Logf("score limit reached at tick %d (%.0f s)", r.Ticks, float64(r.Ticks)/TickRate)
}

func TestTimeLimit(t *testing.T) {
	g := newMatch(t, 1, `{"time_limit_s":2}`)
	g.Join(0, "ada")
	for tick := 1; tick <= 2*TickRate; tick++ {
		if ended := g.Step(); ended != (tick == 2*TickRate) {
			t.Fatalf("tick %d: ended = %v", tick, ended)
		}
	}
	if r := g.Result(); !r.Ended || r.Winner != 0 || r.Ticks != 70 {
		t.Fatalf("result %+v", r)
	}
}

func TestWinner(t *testing.T) {
	g := newMatch(t, 1, "")
	if w := g.Result().Winner; w != -1 {
		t.Fatalf("empty arena winner = %d, want -1", w)
	}
	for i, kd := range [][2]int32{{3, 1}, {5, 4}, {5, 2}, {5, 2}} {
		g.Join(i, "p")
		g.st.players[i].kills, g.st.players[i].deaths = kd[0], kd[1]
	}
	if w := g.Result().Winner; w != 2 {
		t.Fatalf("winner = %d, want 2 (most kills, fewest deaths, lowest slot)", w)
	}
}

// TestKill sets up a duel by hand: a player facing another fires until it dies,
// then it respawns after respawnTicks.
func TestKill(t *testing.T) {
	g := newMatch(t, 1, "")
	g.Join(0, "shooter")
	g.Join(1, "target")
	a, b := &g.st.players[0], &g.st.players[1]
	a.x, a.y, a.angle = cellCenter(9), cellCenter(9), 0 // facing +x
	b.x, b.y = cellCenter(12), cellCenter(9)
	g.Input(0, []byte{BtnFire})
	for i := 0; i < 10*fireCooldown && b.alive; i++ {
		g.Step()
	}
	if b.alive || a.kills != 1 || b.deaths != 1 {
		t.Fatalf("after shooting: target alive=%v health=%d, kills=%d deaths=%d", b.alive, b.health, a.kills, b.deaths)
	}
	g.Input(0, []byte{0})
	stepN(g, respawnTicks)
	if !b.alive || b.health != maxHealth {
		t.Fatalf("target did not respawn after %d ticks", respawnTicks)
	}
	// Far from the shooter: at least the distance to the nearest cell far away.
	dx, dy := int64(a.x-b.x)>>16, int64(a.y-b.y)>>16
	if dx*dx+dy*dy < 36 {
		t.Fatalf("respawned only (%d, %d) cells from the enemy", dx, dy)
	}
}

// TestHostile throws random calls and random event bytes at the game; nothing
// may panic, snapshots keep their sizes and frames theirs.
func TestHostile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := newMatch(t, 3, `{"bots":4}`)
	huge := make([]byte, 1<<20)
	for i := range huge {
		huge[i] = byte(r.IntN(256))
	}
	slots := []int{-1 << 40, -2, -1, 0, 1, 7, 8, 255, 1 << 40}
	for i := 0; i < 3000; i++ {
		s := slots[r.IntN(len(slots))]
		switch r.IntN(6) {
		case 0:
			g.Join(s, string(huge[:r.IntN(100)]))
		case 1:
			g.Leave(s)
		case 2:
			g.Input(s, huge[:r.IntN(4)])
		case 3:
			g.Input(s, huge)
		case 4:
			n := r.IntN(200)
			_ = sdk.ApplyEvents(g, huge[n:n+r.IntN(400)])
		case 5:
			v := g.View(s)
			if len(v) != SnapshotPlayerSize && len(v) != SnapshotSpectatorSize {
				t.Fatalf("snapshot of slot %d has %d bytes", s, len(v))
			}
			if f := g.Render(v); len(f) != abi.Indexed8HeaderSize+ViewWidth*ViewHeight {
				t.Fatalf("frame of slot %d has %d bytes", s, len(f))
			}
		}
		g.Step()
		_ = g.StateHash()
	}
	_ = g.Result()
}

func TestViewFormat(t *testing.T) {
	g := newMatch(t, 1, `{"bots":8}`)
	stepN(g, 100)
	for slot := -1; slot < MaxPlayers; slot++ {
		w, h, pal, pix, err := abi.ParseIndexed8(g.Frame(slot))
		if err != nil || w != ViewWidth || h != ViewHeight || !bytes.Equal(pal, palette[:]) {
			t.Fatalf("slot %d: %dx%d, %v", slot, w, h, err)
		}
		colors := map[byte]bool{}
		for _, p := range pix {
			colors[p] = true
		}
		if len(colors) < 16 {
			t.Errorf("slot %d view uses only %d colours", slot, len(colors))
		}
	}
}

// TestNoAllocs: ticks, snapshots and frames must not allocate (the host caps
// memory and the GC is slow in wasm).
func TestNoAllocs(t *testing.T) {
	g := newMatch(t, 1, `{"bots":8}`)
	stepN(g, 10)
	if n := testing.AllocsPerRun(200, func() { g.Step() }); n != 0 {
		t.Errorf("Step allocates %.1f times", n)
	}
	for _, slot := range []int{0, 5, -1} {
		if n := testing.AllocsPerRun(20, func() { g.View(slot) }); n != 0 {
			t.Errorf("View(%d) allocates %.1f times", slot, n)
		}
		g.Frame(slot) // the renderer allocates its frame once
		if n := testing.AllocsPerRun(20, func() { g.Frame(slot) }); n != 0 {
			t.Errorf("Render(View(%d)) allocates %.1f times", slot, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { g.StateHash() }); n != 0 {
		t.Errorf("StateHash allocates %.1f times", n)
	}
	g.Join(0, "ada")
	ev := events(input(0, BtnFire), input(0, BtnForward, 1, 2), input(3, 1), leave(5), input(0, aimInput(BtnFire, 900, 3)...))
	if n := testing.AllocsPerRun(100, func() { _ = sdk.ApplyEvents(g, ev) }); n != 0 {
		t.Errorf("applying input events allocates %.1f times", n)
	}
}

// TestViewIsPure: snapshots and rendering must not change the state.
func TestViewIsPure(t *testing.T) {
	g := newMatch(t, 1, `{"bots":8}`)
	stepN(g, 300)
	h := g.StateHash()
	for _, v := range views(g) {
		g.Render(v)
	}
	g.Render([]byte("garbage"))
	if g.StateHash() != h {
		t.Fatal("View or Render changed the state")
	}
}
