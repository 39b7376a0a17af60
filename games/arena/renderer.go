package arena

import (
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// Renderer draws arena snapshots (snapshot.go) into 320×200 indexed8 frames:
// the first-person raycaster and HUD for player snapshots, the top-down map
// for spectator snapshots. It is a pure function of the snapshot bytes: it
// never sees the game state, so it works in a module where no match was
// started (the browser instantiates one just to render). Bytes that are not a
// snapshot — truncated, from another format, garbage — give an error frame,
// never a panic.
//
// A Renderer is not safe for concurrent use. It does not allocate after
// NewRenderer.
type Renderer struct {
	frame []byte // indexed8 header + pixels, returned by Render
	s     snapshot

	zbuf [ViewWidth]int64
	// wallTop and wallBot are the rows each column's wall strip covers.
	wallTop, wallBot [ViewWidth]int16
	order            [MaxPlayers]int
	depths           [MaxPlayers]int64
}

// NewRenderer returns a renderer with its frame buffer allocated.
func NewRenderer() *Renderer {
	r := &Renderer{frame: make([]byte, abi.Indexed8HeaderSize+ViewWidth*ViewHeight)}
	abi.Indexed8Header(r.frame, ViewWidth, ViewHeight, &palette)
	return r
}

// Render draws snapshot and returns the indexed8 frame. The returned slice is
// the renderer's frame buffer, reused by the next call: copy it to keep it.
func (r *Renderer) Render(snapshot []byte) []byte {
	c := canvas(r.frame[abi.Indexed8HeaderSize:])
	switch {
	case !r.s.decode(snapshot):
		renderBadSnapshot(c)
	case r.s.kind == snapKindPlayer:
		r.renderPlayer(c)
	default:
		r.renderSpectator(c)
	}
	return r.frame
}

// Render implements sdk.Renderer (ludus_render): it draws a snapshot that
// View returned, here or in another instance of the module. It neither reads
// nor changes the game state; the renderer's buffers are allocated on the
// first call.
func (g *Game) Render(snapshot []byte) []byte {
	if g.rend == nil {
		g.rend = NewRenderer()
	}
	return g.rend.Render(snapshot)
}

// Frame is what a client of slot sees now: Render(View(slot)), for tests,
// benchmarks and tools that want pixels from a native game.
func (g *Game) Frame(slot int) []byte { return g.Render(g.View(slot)) }

// renderBadSnapshot fills the frame with dark red and says so.
func renderBadSnapshot(c canvas) {
	c.fillRect(0, 0, ViewWidth, ViewHeight, tone(rampPlayer0, 3))
	msg := "BAD SNAPSHOT"
	shadowText(c, (ViewWidth-textWidth(len(msg), 2))/2, (ViewHeight-2*glyphH)/2, msg, white, 2)
}

var _ sdk.Renderer = (*Game)(nil)
