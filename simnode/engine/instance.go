package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"ludus.dev/ludus/sdk/abi"
)

// Instance is one running copy of a module: one match. Not safe for concurrent use.
type Instance struct {
	mod api.Module
	mem api.Memory

	fnVersion, fnMeta, fnBuffer, fnInit, fnStep, fnView, fnHash, fnResult, fnSave, fnLoad api.Function

	// tick is the number of ticks stepped so far; the guest's clocks derive from it.
	tick   int64
	period int64 // nanoseconds per tick
	ended  bool

	stack  [2]uint64
	events []byte
	out    *cappedLog
}

// clockBase keeps guest clocks away from zero: Go's runtime aborts when nanotime
// returns 0.
const clockBase = int64(time.Second)

// Instantiate creates a fresh instance whose randomness derives from seed. The
// module's start function (_initialize for Go reactors) has run when it returns.
func (m *Module) Instantiate(ctx context.Context, seed uint64) (*Instance, error) {
	inst, err := m.instantiate(ctx, seed)
	if err != nil {
		return nil, err
	}
	inst.period = int64(time.Second) / int64(m.Meta.TickRate)
	return inst, nil
}

func (m *Module) instantiate(ctx context.Context, seed uint64) (*Instance, error) {
	inst := &Instance{period: int64(time.Second) / 35, out: &cappedLog{max: 64 << 10}}
	now := func() int64 { return clockBase + inst.tick*inst.period }
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: many instances of one module may coexist
		WithStartFunctions("_initialize").
		WithNanotime(now, 1).
		WithWalltime(func() (int64, int32) {
			t := now()
			return t / int64(time.Second), int32(t % int64(time.Second))
		}, 1).
		WithRandSource(newSeededStream(seed)).
		WithStdout(inst.out).
		WithStderr(inst.out)
	mod, err := m.eng.rt.InstantiateModule(ctx, m.compiled, cfg)
	if err != nil {
		return nil, &TrapError{Export: "_initialize", Err: err}
	}
	inst.mod = mod
	inst.mem = mod.Memory()
	get := func(name string) api.Function { return mod.ExportedFunction(name) }
	inst.fnVersion = get(abi.ExportABIVersion)
	inst.fnMeta = get(abi.ExportMeta)
	inst.fnBuffer = get(abi.ExportBuffer)
	inst.fnInit = get(abi.ExportInit)
	inst.fnStep = get(abi.ExportStep)
	inst.fnView = get(abi.ExportView)
	inst.fnHash = get(abi.ExportStateHash)
	inst.fnResult = get(abi.ExportResult)
	if m.HasCheckpoint {
		inst.fnSave = get(abi.ExportSave)
		inst.fnLoad = get(abi.ExportLoad)
	}
	return inst, nil
}

// Close frees the instance's memory.
func (i *Instance) Close(ctx context.Context) error { return i.mod.Close(ctx) }

// Tick is the number of ticks stepped so far.
func (i *Instance) Tick() int64 { return i.tick }

// Ended reports whether the game said it ended.
func (i *Instance) Ended() bool { return i.ended }

// Output returns what the guest wrote to stdout/stderr (capped).
func (i *Instance) Output() string { return i.out.String() }

// TrapError is a guest failure: a trap, a bad return value or a broken buffer.
type TrapError struct {
	Export string
	Tick   int64
	Err    error
}

func (e *TrapError) Error() string {
	return fmt.Sprintf("game module failed in %s at tick %d: %v", e.Export, e.Tick, e.Err)
}

func (e *TrapError) Unwrap() error { return e.Err }

func (i *Instance) call(ctx context.Context, fn api.Function, params ...uint64) (uint64, error) {
	s := i.stack[:]
	copy(s, params)
	if err := fn.CallWithStack(ctx, s); err != nil {
		return 0, &TrapError{Export: fn.Definition().ExportNames()[0], Tick: i.tick, Err: err}
	}
	return s[0], nil
}

// packed calls a function returning a packed slice and returns the bytes, which
// alias guest memory until the next call into the instance.
func (i *Instance) packed(ctx context.Context, fn api.Function) ([]byte, error) {
	res, err := i.call(ctx, fn)
	if err != nil {
		return nil, err
	}
	return i.read(fn, res)
}

func (i *Instance) read(fn api.Function, res uint64) ([]byte, error) {
	ptr, n := abi.Unpack(res)
	if n == 0 {
		return nil, nil
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		return nil, &TrapError{Export: fn.Definition().ExportNames()[0], Tick: i.tick,
			Err: fmt.Errorf("returned slice [%d, +%d) outside linear memory of %d bytes", ptr, n, i.mem.Size())}
	}
	return b, nil
}

// writeBuffer copies b into the guest's scratch buffer.
func (i *Instance) writeBuffer(ctx context.Context, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	ptr, err := i.call(ctx, i.fnBuffer, uint64(len(b)))
	if err != nil {
		return err
	}
	if ptr == 0 || !i.mem.Write(uint32(ptr), b) {
		return &TrapError{Export: abi.ExportBuffer, Tick: i.tick,
			Err: fmt.Errorf("returned no usable buffer of %d bytes (pointer %d)", len(b), uint32(ptr))}
	}
	return nil
}

// Init starts the match with its seed and config.
func (i *Instance) Init(ctx context.Context, seed uint64, config []byte) error {
	if err := i.writeBuffer(ctx, config); err != nil {
		return err
	}
	code, err := i.call(ctx, i.fnInit, seed, uint64(len(config)))
	if err != nil {
		return err
	}
	if int32(code) != 0 {
		return &TrapError{Export: abi.ExportInit, Err: fmt.Errorf("refused the config (error code %d)", int32(code))}
	}
	return nil
}

// Step applies events and advances one tick. It reports whether the game ended.
func (i *Instance) Step(ctx context.Context, events []abi.Event) (bool, error) {
	i.events = abi.AppendEvents(i.events[:0], events)
	return i.StepEncoded(ctx, i.events)
}

// StepEncoded is Step with events already in their wire encoding.
func (i *Instance) StepEncoded(ctx context.Context, events []byte) (bool, error) {
	if i.ended {
		return true, nil
	}
	if err := i.writeBuffer(ctx, events); err != nil {
		return false, err
	}
	code, err := i.call(ctx, i.fnStep, uint64(len(events)))
	if err != nil {
		return false, err
	}
	i.tick++
	switch int32(code) {
	case abi.StepRunning:
	case abi.StepEnded:
		i.ended = true
	default:
		return false, &TrapError{Export: abi.ExportStep, Tick: i.tick, Err: fmt.Errorf("returned %d; want 0 (running) or 1 (ended)", int32(code))}
	}
	return i.ended, nil
}

// View renders slot's view (abi.SpectatorSlot for the spectator). The bytes alias
// guest memory until the next call: copy them to keep them.
func (i *Instance) View(ctx context.Context, slot int) ([]byte, error) {
	res, err := i.call(ctx, i.fnView, api.EncodeI32(int32(slot)))
	if err != nil {
		return nil, err
	}
	return i.read(i.fnView, res)
}

// StateHash returns the game's hash of its state.
func (i *Instance) StateHash(ctx context.Context) (uint64, error) {
	return i.call(ctx, i.fnHash)
}

// Result returns the module's JSON match result (copied).
func (i *Instance) Result(ctx context.Context) ([]byte, error) {
	b, err := i.packed(ctx, i.fnResult)
	return append([]byte(nil), b...), err
}

// Save returns a checkpoint (copied), or nil if the module has none.
func (i *Instance) Save(ctx context.Context) ([]byte, error) {
	if i.fnSave == nil {
		return nil, nil
	}
	b, err := i.packed(ctx, i.fnSave)
	return append([]byte(nil), b...), err
}

// Load restores a checkpoint taken at tick.
func (i *Instance) Load(ctx context.Context, tick int64, state []byte) error {
	if i.fnLoad == nil {
		return fmt.Errorf("engine: module has no checkpoint support")
	}
	if err := i.writeBuffer(ctx, state); err != nil {
		return err
	}
	code, err := i.call(ctx, i.fnLoad, uint64(len(state)))
	if err != nil {
		return err
	}
	if int32(code) != 0 {
		return &TrapError{Export: abi.ExportLoad, Tick: i.tick, Err: fmt.Errorf("refused the checkpoint (error code %d)", int32(code))}
	}
	i.tick = tick
	return nil
}

// seededStream is the guest's random_get: splitmix64 from the match seed, so the
// same seed reproduces Go's map order and math/rand inside the guest. It never
// yields all-zero output (Go falls back to a clock-derived seed when it does).
type seededStream struct{ state uint64 }

func newSeededStream(seed uint64) *seededStream {
	return &seededStream{state: seed ^ 0x9E3779B97F4A7C15}
}

func (s *seededStream) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (s *seededStream) Read(p []byte) (int, error) {
	var buf [8]byte
	for n := 0; n < len(p); n += 8 {
		binary.LittleEndian.PutUint64(buf[:], s.next()|1)
		copy(p[n:], buf[:])
	}
	return len(p), nil
}

// cappedLog keeps the first max bytes a guest prints; the rest is counted, not kept,
// so a chatty or hostile module cannot grow host memory.
type cappedLog struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int
}

func (l *cappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.max - len(l.buf)
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		l.buf = append(l.buf, p[:room]...)
	}
	l.dropped += len(p) - max(room, 0)
	return len(p), nil
}

func (l *cappedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		return fmt.Sprintf("%s\n[%d bytes dropped]", l.buf, l.dropped)
	}
	return string(l.buf)
}
