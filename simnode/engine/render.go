package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"ludus.dev/ludus/sdk/abi"
)

// Renderer draws a module's snapshots into indexed8 frames with its
// ludus_render export, for clients that want pixels (docs/ABI.md, "Snapshots
// and ludus_render"). It runs on an instance of its own on which only
// _initialize ran — ludus_init never, and never a match's instance, whose state
// rendering must not see or touch — with the same memory cap, fuel-based
// interruption and per-call deadline as a match's instance (InstanceOptions).
//
// Any failure — a trap, a runaway stopped at its deadline, a frame that is not
// an indexed8 frame of the module's view_width × view_height — poisons the
// renderer only: its memory is freed and that call and every later one return
// the error (Err). Make a new Renderer to go on; matches and other renderers of
// the module are not affected.
//
// A Renderer is not safe for concurrent use.
type Renderer struct {
	inst          *Instance
	fn            api.Function
	width, height int
}

// ErrNoRenderer is returned by NewRenderer for a module without
// snapshot_format: its views are drawn already.
var ErrNoRenderer = errors.New("engine: the module declares no snapshot_format, so its views need no renderer")

// NewRenderer returns a renderer for m's snapshots (m.HasRenderer must be
// true). Its instance comes from the warm pool for opts when one is ready
// (Warm), as for a match, else it is instantiated now (5-20 ms for a Go
// module).
func (m *Module) NewRenderer(ctx context.Context, opts InstanceOptions) (*Renderer, error) {
	if !m.HasRenderer {
		return nil, ErrNoRenderer
	}
	inst, _, err := m.Acquire(ctx, 0, opts)
	if err != nil {
		return nil, err
	}
	return &Renderer{inst: inst, fn: inst.mod.ExportedFunction(abi.ExportRender),
		width: m.Meta.ViewWidth, height: m.Meta.ViewHeight}, nil
}

// Render draws snapshot (a view the module's ludus_view returned) and returns
// the indexed8 frame. The bytes alias the renderer's guest memory and stay
// valid until the next Render or Close: copy them to keep them.
func (r *Renderer) Render(ctx context.Context, snapshot []byte) ([]byte, error) {
	if r.inst.failed != nil {
		return nil, r.inst.failed
	}
	if err := r.inst.writeBuffer(ctx, snapshot); err != nil {
		return nil, r.fail(ctx, err)
	}
	res, err := r.inst.call(ctx, r.fn, uint64(len(snapshot)))
	if err != nil {
		r.fn = nil      // and its grown stack with it
		return nil, err // the instance is poisoned already
	}
	frame, err := r.inst.read(r.fn, res)
	if err != nil {
		return nil, r.fail(ctx, err)
	}
	w, h, _, _, err := abi.ParseIndexed8(frame)
	if err == nil && (w != r.width || h != r.height) {
		err = fmt.Errorf("drew a %dx%d frame; the module declares %dx%d views", w, h, r.width, r.height)
	}
	if err != nil {
		return nil, r.fail(ctx, &TrapError{Export: abi.ExportRender, Err: err})
	}
	return frame, nil
}

// fail poisons the renderer with err (unless a call already did) and returns
// the error every later call returns.
func (r *Renderer) fail(ctx context.Context, err error) error {
	if r.inst.failed == nil {
		r.inst.failed = err
		r.inst.closeModule(context.WithoutCancel(ctx))
	}
	return r.inst.failed
}

// Err returns the error that made the renderer unusable, if any.
func (r *Renderer) Err() error { return r.inst.failed }

// MemoryBytes is the size of the renderer's linear memory (0 once poisoned).
func (r *Renderer) MemoryBytes() int { return r.inst.MemoryBytes() }

// Output returns what ludus_render wrote to stdout/stderr (capped).
func (r *Renderer) Output() string { return r.inst.Output() }

// Close frees the renderer's memory. It may be called more than once.
func (r *Renderer) Close(ctx context.Context) error { return r.inst.Close(ctx) }
