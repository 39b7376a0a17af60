// Package enginecheck runs sdktest's determinism check on a compiled game
// module, in any language, through the engine that runs matches: the same
// validation as an upload, instances with the same deterministic host (clocks
// from the tick, randomness from the seed), views through ludus_view and
// snapshots drawn by an engine Renderer, checkpoints saved from one instance
// and loaded into a fresh one after ludus_init, as a node restoring a match
// does. It is the logic of `ludus ctl module check`.
package enginecheck

import (
	"context"
	"fmt"

	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/sdk/sdktest"
	"ludus.dev/ludus/simnode/engine"
)

// Check validates wasm as an upload would and then plays the match of o on
// it several ways (sdktest.Check). Validation errors wrap
// engine.ErrInvalidModule; a divergence is an *sdktest.Divergence; traps wrap
// sdktest.ErrGame.
func Check(ctx context.Context, wasm []byte, o sdktest.Options) (sdktest.Report, error) {
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		return sdktest.Report{}, err
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		return sdktest.Report{}, err
	}
	return sdktest.Check(Target(ctx, m), o)
}

// Target adapts a compiled module to sdktest: every Start is a new instance
// (seeded with Options.Seed at Init, as a match's instance is).
func Target(ctx context.Context, m *engine.Module) sdktest.Target {
	return target{ctx: ctx, m: m}
}

type target struct {
	ctx context.Context
	m   *engine.Module
}

func (t target) Meta() abi.Meta { return t.m.Meta }

func (t target) Start() (sdktest.Instance, error) {
	return &instance{t: t}, nil
}

// StartRenderer returns an engine Renderer: an instance of its own where
// ludus_init never runs, as a node draws snapshots.
func (t target) StartRenderer() (sdktest.RenderCloser, error) {
	r, err := t.m.NewRenderer(t.ctx, engine.InstanceOptions{})
	if err != nil {
		return nil, err
	}
	return renderer{t.ctx, r}, nil
}

type renderer struct {
	ctx context.Context
	r   *engine.Renderer
}

func (r renderer) Render(snapshot []byte) ([]byte, error) {
	f, err := r.r.Render(r.ctx, snapshot)
	if err != nil && r.r.Output() != "" {
		err = fmt.Errorf("%w\nmodule output:\n%s", err, r.r.Output())
	}
	return f, err
}

func (r renderer) Close() error { return r.r.Close(r.ctx) }

// instance instantiates at Init, with the match seed.
type instance struct {
	t    target
	inst *engine.Instance
}

func (i *instance) match() (*engine.Instance, error) {
	if i.inst == nil {
		return nil, fmt.Errorf("the instance was not initialised")
	}
	if err := i.inst.Err(); err != nil {
		return nil, err
	}
	return i.inst, nil
}

func (i *instance) Init(seed uint64, config []byte) error {
	inst, err := i.t.m.Instantiate(i.t.ctx, seed)
	if err != nil {
		return withOutput(err, nil)
	}
	i.inst = inst
	return withOutput(inst.Init(i.t.ctx, seed, config), inst)
}

func (i *instance) Step(events []byte) (bool, error) {
	inst, err := i.match()
	if err != nil {
		return false, err
	}
	ended, err := inst.StepEncoded(i.t.ctx, events)
	return ended, withOutput(err, inst)
}

func (i *instance) View(slot int) ([]byte, error) {
	inst, err := i.match()
	if err != nil {
		return nil, err
	}
	v, err := inst.View(i.t.ctx, slot)
	return v, withOutput(err, inst)
}

func (i *instance) StateHash() (uint64, error) {
	inst, err := i.match()
	if err != nil {
		return 0, err
	}
	h, err := inst.StateHash(i.t.ctx)
	return h, withOutput(err, inst)
}

func (i *instance) Save() ([]byte, error) {
	inst, err := i.match()
	if err != nil {
		return nil, err
	}
	b, err := inst.Save(i.t.ctx)
	return b, withOutput(err, inst)
}

func (i *instance) Load(tick int64, b []byte) error {
	inst, err := i.match()
	if err != nil {
		return err
	}
	return withOutput(inst.Load(i.t.ctx, tick, b), inst)
}

func (i *instance) Close() error {
	if i.inst != nil {
		return i.inst.Close(i.t.ctx)
	}
	return nil
}

// withOutput adds what the module wrote to stderr (a Go panic's message, say)
// to an error of a call into it.
func withOutput(err error, inst *engine.Instance) error {
	if err == nil || inst == nil || inst.Output() == "" {
		return err
	}
	return fmt.Errorf("%w\nmodule output:\n%s", err, inst.Output())
}
