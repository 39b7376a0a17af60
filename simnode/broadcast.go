package simnode

import "sync/atomic"

// cell publishes immutable values to any number of readers without locks: the
// writer swaps in a new value and closes the previous value's channel; a reader
// loads the newest value and waits on its channel for the next. A slow reader
// simply finds a newer value when it looks again — it skips, it never blocks the
// writer.
type cell[T any] struct {
	p atomic.Pointer[version[T]]
}

type version[T any] struct {
	v    T
	seq  uint64
	next chan struct{} // closed when a newer version is published
}

func newCell[T any](v T) *cell[T] {
	c := &cell[T]{}
	c.p.Store(&version[T]{v: v, next: make(chan struct{})})
	return c
}

// publish makes v the newest value. Only the owning actor calls it.
func (c *cell[T]) publish(v T) {
	old := c.p.Load()
	c.p.Store(&version[T]{v: v, seq: old.seq + 1, next: make(chan struct{})})
	close(old.next)
}

// load returns the newest version.
func (c *cell[T]) load() *version[T] { return c.p.Load() }
