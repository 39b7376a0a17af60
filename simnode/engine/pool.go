package engine

import (
	"context"
	"sync"
)

// Warm instances: instantiating a Go module and running its _initialize takes
// 5-20 ms, too long for the path that creates a match. A pool per (module,
// options) keeps instances that have run _initialize and nothing else. Every
// instance, warm or cold, runs _initialize with the same fixed random stream
// (warmSeed) and switches to the match seed just before ludus_init, so a match
// computes the same thing whichever way its instance was made — and so does its
// replay.

type pool struct {
	m      *Module
	opts   InstanceOptions
	ready  chan *Instance
	wake   chan struct{}
	stop   chan struct{} // closed by stopPools
	size   int
	mu     sync.Mutex
	lastEr error
}

// Warm keeps n pre-instantiated instances of m with opts ready for Acquire,
// refilled in the background (one goroutine per pool). n = 0 stops refilling
// and frees the idle instances. Safe for concurrent use.
func (m *Module) Warm(n int, opts InstanceOptions) {
	if n > 0 {
		m.used.Store(m.eng.now())
	}
	m.poolMu.Lock()
	p, ok := m.pools[opts]
	if !ok {
		if n <= 0 || m.evicted.Load() {
			m.poolMu.Unlock()
			return
		}
		e := m.eng
		e.mu.Lock()
		select {
		case <-e.closed:
			e.mu.Unlock()
			m.poolMu.Unlock()
			return
		default:
		}
		e.fillers.Add(1)
		e.mu.Unlock()
		p = &pool{m: m, opts: opts, ready: make(chan *Instance, 1024), wake: make(chan struct{}, 1), stop: make(chan struct{})}
		m.pools[opts] = p
		go p.fill()
	}
	m.poolMu.Unlock()
	p.mu.Lock()
	p.size = min(max(n, 0), cap(p.ready))
	p.mu.Unlock()
	p.poke()
}

// Acquire returns an instance for a match with seed: a warm one when the pool
// for opts has one ready, else a freshly instantiated one. Either way the
// instance behaves identically.
func (m *Module) Acquire(ctx context.Context, seed uint64, opts InstanceOptions) (inst *Instance, warm bool, err error) {
	m.used.Store(m.eng.now())
	m.poolMu.Lock()
	p := m.pools[opts]
	m.poolMu.Unlock()
	if p != nil {
		select {
		case inst = <-p.ready:
			p.poke()
			inst.start(seed)
			return inst, true, nil
		default:
			p.poke()
		}
	}
	inst, err = m.InstantiateWith(ctx, seed, opts)
	return inst, false, err
}

// WarmReady is the number of warm instances ready for opts.
func (m *Module) WarmReady(opts InstanceOptions) int {
	m.poolMu.Lock()
	p := m.pools[opts]
	m.poolMu.Unlock()
	if p == nil {
		return 0
	}
	return len(p.ready)
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) fill() {
	defer p.m.eng.fillers.Done()
	ctx := context.Background()
	closed := p.m.eng.closed
	for {
		select {
		case <-closed:
			p.drain(ctx, 0)
			return
		case <-p.stop:
			p.drain(ctx, 0)
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			size := p.size
			p.mu.Unlock()
			if len(p.ready) >= size {
				p.drain(ctx, size)
				break
			}
			inst, err := p.m.instantiate(ctx, p.opts)
			if err != nil {
				p.mu.Lock()
				p.lastEr = err
				p.mu.Unlock()
				break
			}
			select {
			case p.ready <- inst:
			case <-closed:
				inst.Close(ctx)
				p.drain(ctx, 0)
				return
			case <-p.stop:
				inst.Close(ctx)
				p.drain(ctx, 0)
				return
			}
		}
	}
}

// drain closes idle instances beyond size.
func (p *pool) drain(ctx context.Context, size int) {
	for len(p.ready) > size {
		select {
		case inst := <-p.ready:
			inst.Close(ctx)
		default:
			return
		}
	}
}

// stopPools ends the module's pools' goroutines (EvictIdle: they hold no
// instance by then).
func (m *Module) stopPools() {
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	for opts, p := range m.pools {
		close(p.stop)
		delete(m.pools, opts)
	}
}
