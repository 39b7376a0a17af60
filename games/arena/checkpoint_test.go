package arena

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"ludus.dev/ludus/sdk"
)

// TestSaveLoad: a loaded checkpoint has the saved game's hash, and both games
// stay identical when they continue with the same events.
func TestSaveLoad(t *testing.T) {
	a := newMatch(t, 99, `{"bots":5,"score_limit":1000}`)
	sdk.StepEvents(a, events(join(0, "ada"), join(1, "bøb"), input(0, BtnForward|BtnFire)))
	stepN(a, 400)

	ck := a.Save()
	if len(ck) > ckptMaxBytes {
		t.Fatalf("checkpoint of %d bytes exceeds ckptMaxBytes %d", len(ck), ckptMaxBytes)
	}
	b := New()
	if err := b.Load(ck); err != nil {
		t.Fatal(err)
	}
	if a.StateHash() != b.StateHash() {
		t.Fatal("hash differs right after Load")
	}
	if !bytes.Equal(b.Save(), ck) {
		t.Fatal("Save after Load differs")
	}
	r := rand.New(rand.NewPCG(4, 5))
	for tick := 0; tick < 2000; tick++ {
		ev := events(input(uint8(r.IntN(3)), byte(r.IntN(128))))
		if tick == 1000 {
			ev = events(leave(1), join(2, "carol"))
		}
		ea, eb := sdk.StepEvents(a, ev), sdk.StepEvents(b, ev)
		if a.StateHash() != b.StateHash() || ea != eb {
			t.Fatalf("tick %d after load: hashes differ", tick)
		}
	}
	if !bytes.Equal(a.View(0), append([]byte(nil), b.View(0)...)) {
		t.Fatal("views differ after load")
	}
}

// TestLoadRejects: truncated, extended and corrupted checkpoints are errors
// and leave the game untouched.
func TestLoadRejects(t *testing.T) {
	a := newMatch(t, 1, `{"bots":8}`)
	stepN(a, 175)
	ck := a.Save()
	g := newMatch(t, 2, `{"bots":3}`)
	h := g.StateHash()

	bad := [][]byte{nil, []byte("ARN1"), append(append([]byte(nil), ck...), 0)}
	for n := 0; n < len(ck); n += 7 {
		bad = append(bad, ck[:n])
	}
	corrupt := func(off int, v ...byte) []byte {
		c := append([]byte(nil), ck...)
		copy(c[off:], v)
		return c
	}
	p0 := ckptHeader // first player record
	k0 := len(ck) - feedLen*ckptKill
	if f := a.st.feed; f[0].tick == 0 || f[1].tick == 0 || f[2].tick != 0 || f[0].tick >= 160 {
		t.Fatalf("the match has another kill feed (%+v): pick corruptions of its entries again", f)
	}
	last := k0 + (feedLen-1)*ckptKill
	bad = append(bad,
		corrupt(0, 'X'),                             // magic
		corrupt(20, 2),                              // ended flag
		corrupt(29, 0, 0, 0, 0),                     // score limit 0
		corrupt(p0, 0xF0),                           // unknown flags
		corrupt(p0+1, 0x80),                         // input bit 7
		corrupt(p0+2, 0, 0, 0, 0x80),                // x negative
		corrupt(p0+6, 0, 0, 0x7F, 0),                // y far outside
		corrupt(p0+12, 0xFF, 0, 0, 0),               // health 255
		corrupt(p0+ckptPlayer-1, maxNameBytes+1),    // name too long
		corrupt(p0+52, 0xFF, 0xFF),                  // hit after the current tick
		corrupt(p0+60, 0, 0, 0, 0, 0, 0, 0, 0x80),   // damage at a negative tick
		corrupt(k0, 0xFF, 0xFF),                     // kill after the current tick
		corrupt(k0+ckptKill, 160),                   // a kill newer than the one before it
		corrupt(k0+8, MaxPlayers),                   // killer out of range
		corrupt(k0+9, ck[k0+8]),                     // killer == victim
		corrupt(k0+10, 0x80),                        // non-ASCII name
		corrupt(k0+10, 0),                           // bytes after the end of a name
		corrupt(last+9, 1),                          // data in an empty entry
		corrupt(last, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1), // a kill after an empty entry
	)
	for i, b := range bad {
		if err := g.Load(b); err == nil {
			t.Errorf("case %d (%d bytes): Load accepted a bad checkpoint", i, len(b))
		}
		if g.StateHash() != h {
			t.Fatalf("case %d: a failed Load changed the state", i)
		}
	}

	// Random corruption never panics; what loads must be playable.
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 5000; i++ {
		c := append([]byte(nil), ck...)
		for k := r.IntN(4); k >= 0; k-- {
			c[r.IntN(len(c))] = byte(r.IntN(256))
		}
		if g.Load(c) == nil {
			g.Step()
			g.View(r.IntN(10) - 1)
		}
	}
}
