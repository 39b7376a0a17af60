package sdk

import (
	"testing"

	"ludus.dev/ludus/sdk/abi"
)

// recorder is a Game that logs the calls it gets.
type recorder struct {
	calls []string
	steps int
}

func (r *recorder) Meta() abi.Meta {
	return abi.Meta{Name: "rec", TickRate: 10, MaxPlayers: 4, FrameDivisor: 1, ViewFormat: "text"}
}
func (r *recorder) Init(uint64, []byte) error  { return nil }
func (r *recorder) Join(slot int, name string) { r.log("join", slot, name) }
func (r *recorder) Leave(slot int)             { r.log("leave", slot, "") }
func (r *recorder) Input(slot int, p []byte)   { r.log("input", slot, string(p)) }
func (r *recorder) Step() bool                 { r.steps++; return r.steps >= 2 }
func (r *recorder) View(int) []byte            { return nil }
func (r *recorder) StateHash() uint64          { return 0 }
func (r *recorder) Result() abi.Result         { return abi.Result{} }

func (r *recorder) log(kind string, slot int, arg string) {
	r.calls = append(r.calls, kind+" "+string(rune('0'+slot))+" "+arg)
}

func TestRegister(t *testing.T) {
	defer func() { registered = nil }()
	mustPanic(t, "Register(nil)", func() { Register(nil) })
	g := &recorder{}
	Register(g)
	if Registered() != g {
		t.Fatal("Registered() does not return the registered game")
	}
	mustPanic(t, "second Register", func() { Register(&recorder{}) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestApplyEvents(t *testing.T) {
	g := &recorder{}
	b := abi.AppendEvents(nil, []abi.Event{
		{Kind: abi.EventJoin, Slot: 1, Payload: []byte("ada")},
		{Kind: abi.EventInput, Slot: 1, Payload: []byte("x")},
		{Kind: abi.EventInput, Slot: 4, Payload: []byte("out of range")},
		{Kind: 9, Slot: 0, Payload: []byte("unknown kind")},
		{Kind: abi.EventLeave, Slot: 1},
		{Kind: abi.EventJoin, Slot: 255, Payload: []byte("out of range")},
	})
	b = append(b, byte(abi.EventJoin), 0, 5, 0, 'a') // claims 5 payload bytes, has 1
	err := ApplyEvents(g, b)
	if err != abi.ErrMalformed {
		t.Errorf("damaged tail: err = %v, want ErrMalformed", err)
	}
	want := []string{"join 1 ada", "input 1 x", "leave 1 "}
	if len(g.calls) != len(want) {
		t.Fatalf("calls %q, want %q", g.calls, want)
	}
	for i := range want {
		if g.calls[i] != want[i] {
			t.Fatalf("calls %q, want %q", g.calls, want)
		}
	}
	if StepEvents(g, nil) || !StepEvents(g, []byte{1}) || g.steps != 2 {
		t.Fatal("StepEvents must step once per call, also after a damaged tail, and report the end")
	}
}

// painter is a recorder whose views are snapshots it renders.
type painter struct{ recorder }

func (p *painter) View(slot int) []byte      { return []byte{byte(slot)} }
func (p *painter) Render(snap []byte) []byte { return append([]byte("frame of "), snap...) }

func TestFrame(t *testing.T) {
	if got := Frame(&painter{}, 3); string(got) != "frame of \x03" {
		t.Fatalf("Frame of a Renderer = %q", got)
	}
	if got := Frame(&recorder{}, 3); got != nil {
		t.Fatalf("Frame of a game without a renderer = %q, want its view", got)
	}
	var _ Renderer = (*painter)(nil)
}

// TestErrorLine: the SDK reports an error to the host as one "error: TEXT"
// line on stderr (docs/ABI.md, "Errors and output").
func TestErrorLine(t *testing.T) {
	for in, want := range map[string]string{
		`unknown map "dust3"`: `error: unknown map "dust3"`,
		"two\r\nlines":        "error: two / lines",
		"":                    "error: ",
	} {
		if got := errorLine(in); got != want {
			t.Errorf("errorLine(%q) = %q, want %q", in, got, want)
		}
	}
}
