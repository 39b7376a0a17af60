package simnode

import (
	"sync"
	"time"

	"ludus.dev/ludus/simnode/engine"
)

// Warm pools sized by demand.
//
// A warm instance (engine.Module.Warm) saves a match start the 5-20 ms of
// instantiating a Go module, but each one holds its linear memory, so a fixed
// pool per build is either too small for a matchmaker that allocates a burst
// of matches at once (the burst's tail starts cold) or wasteful for a build
// nobody plays any more. Each node therefore sizes each build's pool from the
// starts it saw itself: the busiest second of the last minute, at least the
// configured floor (Config.WarmInstances) and at most the ceiling
// (Config.WarmInstancesMax). A node serves one region, so this is the per-build,
// per-region sizing the matchmaker's allocations need. A build with no start
// for warmIdle gives its instances back; the next start of it is cold and
// warms it again.

const (
	// warmWindow is how far back demand is remembered.
	warmWindow = time.Minute
	// warmIdle is how long a build keeps a pool without a start.
	warmIdle = 10 * time.Minute
)

// warmDemand tracks match starts per build and sizes the builds' pools.
type warmDemand struct {
	floor, ceiling int

	mu     sync.Mutex
	builds map[string]*buildDemand
}

type buildDemand struct {
	mod    *engine.Module
	opts   engine.InstanceOptions
	starts []time.Time // within warmWindow, oldest first
	last   time.Time
	size   int
}

func newWarmDemand(floor, ceiling int) *warmDemand {
	return &warmDemand{floor: floor, ceiling: max(ceiling, floor), builds: map[string]*buildDemand{}}
}

// started records a match start of mod's build at now and resizes its pool;
// builds idle for warmIdle give their instances back. It returns the build's
// new pool size.
func (d *warmDemand) started(now time.Time, mod *engine.Module, opts engine.InstanceOptions) int {
	if d.floor <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseIdleLocked(now, mod.BuildID)
	b := d.builds[mod.BuildID]
	if b == nil || b.mod != mod {
		// New, or compiled anew after the engine released it: size the
		// pool of this module.
		b = &buildDemand{mod: mod, opts: opts, starts: b.startsOrNil()}
		d.builds[mod.BuildID] = b
	}
	b.last = now
	b.starts = append(b.starts, now)
	cut := 0
	for cut < len(b.starts) && now.Sub(b.starts[cut]) > warmWindow {
		cut++
	}
	b.starts = b.starts[cut:]
	if size := d.sizeFor(b.starts); size != b.size {
		b.size = size
		mod.Warm(size, opts)
	}
	return b.size
}

// releaseIdle gives back the instances of builds (but keep) with no start
// for warmIdle.
func (d *warmDemand) releaseIdle(now time.Time, keep string) {
	if d.floor <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseIdleLocked(now, keep)
}

func (d *warmDemand) releaseIdleLocked(now time.Time, keep string) {
	for id, b := range d.builds {
		if id != keep && now.Sub(b.last) >= warmIdle {
			b.mod.Warm(0, b.opts)
			delete(d.builds, id)
		}
	}
}

// startsOrNil is b's recent starts, nil for no b.
func (b *buildDemand) startsOrNil() []time.Time {
	if b == nil {
		return nil
	}
	return b.starts
}

// sizeFor is the pool size for starts (sorted, within the window): the most
// starts in any one second, clamped to [floor, ceiling].
func (d *warmDemand) sizeFor(starts []time.Time) int {
	peak, lo := 0, 0
	for hi := range starts {
		for starts[hi].Sub(starts[lo]) >= time.Second {
			lo++
		}
		peak = max(peak, hi-lo+1)
	}
	return min(max(peak, d.floor), d.ceiling)
}

// size is a build's current pool size (0 when it has none).
func (d *warmDemand) size(buildID string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.builds[buildID]; b != nil {
		return b.size
	}
	return 0
}

// total is the sum of every build's pool size (the warm target gauge).
func (d *warmDemand) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, b := range d.builds {
		n += b.size
	}
	return n
}
