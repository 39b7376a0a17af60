package sqlstore

import (
	"testing"
	"time"
)

// The overlap follows the typical statement: 1 ms while statements are
// fast, longer as they slow (so fewer batches run side by side), never past
// 10 ms, and one stall moves it by at most an eighth of the bound.
func TestSessionOverlapFollowsTheTypicalStatement(t *testing.T) {
	var b sessionBatcher
	if got := b.overlap(); got != minSessionOverlap {
		t.Fatalf("before any statement: %v, want %v", got, minSessionOverlap)
	}
	for range 100 {
		b.observe(200 * time.Microsecond)
	}
	if got := b.overlap(); got != minSessionOverlap {
		t.Fatalf("after fast statements: %v, want %v", got, minSessionOverlap)
	}
	for range 100 {
		b.observe(1200 * time.Microsecond)
	}
	if got := b.overlap(); got < 3400*time.Microsecond || got > 3600*time.Microsecond {
		t.Fatalf("after 1.2 ms statements: %v, want about 3.6 ms", got)
	}
	for range 100 {
		b.observe(200 * time.Microsecond)
	}
	before := b.overlap()
	b.observe(5 * time.Second) // a statement stuck on a lock
	if got := b.overlap(); got-before > sessionOverlapFactor*maxSessionOverlap/8+time.Microsecond {
		t.Fatalf("one stall moved the overlap from %v to %v", before, got)
	}
	for range 100 {
		b.observe(time.Minute)
	}
	if got := b.overlap(); got != maxSessionOverlap {
		t.Fatalf("after stalls only: %v, want the bound %v", got, maxSessionOverlap)
	}
}
