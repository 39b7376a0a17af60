package simnode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ludus.dev/ludus/internal/clock"
)

// Batch games (package batch) may share a node with live matches at a lower
// priority: a batch worker on the node pauses its games between chunks of
// ticks while the node's live matches are late (batch.WorkerConfig.LiveLate).
// LiveLateness is what it asks. It reads the node's tick lateness histogram
// (ludus_tick_lateness_seconds), which every tick of every match observes,
// so the tick path pays nothing for it.

// Defaults of Node.LiveLateness.
const (
	// DefaultLiveLateThreshold is below the 5 ms lateness goal of live
	// ticks: batch games back off before live matches miss it, not after.
	DefaultLiveLateThreshold = 2 * time.Millisecond
	// DefaultLiveLateHold is about three ticks at 35 Hz: a node whose live
	// matches tick rarely still holds its batch games back between two
	// late ticks.
	DefaultLiveLateHold = 100 * time.Millisecond
)

// liveLateSample is how often LiveLateness.Late reads the histogram at most;
// between reads it answers from the last one. Batch games ask between every
// chunk of ticks (a fraction of a millisecond each).
const liveLateSample = time.Millisecond

// LiveLateness tells whether a node's live matches are late. Safe for
// concurrent use.
type LiveLateness struct {
	lateness  prometheus.Histogram
	clock     clock.Clock
	threshold float64 // seconds: an upper bound of one of the histogram's buckets
	hold      time.Duration

	late atomic.Bool // the last answer, for callers that find mu taken

	mu        sync.Mutex
	sampledAt time.Time
	over      uint64    // ticks observed later than threshold, as last read
	lateAt    time.Time // when a read last found more of them
}

// LiveLateness returns a watch over the node's live matches: its Late reports
// whether a tick of a match on this node started more than threshold after
// its scheduled time within the last hold. threshold is rounded down to a
// bucket bound of the lateness histogram (they resolve 1..5 ms in steps of
// 1 ms); zero values take DefaultLiveLateThreshold and DefaultLiveLateHold.
// Ticks observed before the call do not count.
func (n *Node) LiveLateness(threshold, hold time.Duration) *LiveLateness {
	if threshold <= 0 {
		threshold = DefaultLiveLateThreshold
	}
	if hold <= 0 {
		hold = DefaultLiveLateHold
	}
	b := latenessBuckets[0]
	for _, ub := range latenessBuckets {
		if ub <= threshold.Seconds() {
			b = ub
		}
	}
	l := &LiveLateness{lateness: n.metrics.lateness, clock: n.cfg.Clock, threshold: b, hold: hold}
	l.over = l.read()
	l.sampledAt = l.clock.Now()
	return l
}

// Threshold is the lateness a tick must exceed to count as late.
func (l *LiveLateness) Threshold() time.Duration {
	return time.Duration(l.threshold * float64(time.Second))
}

// Late reports whether a live tick started late within the last hold.
func (l *LiveLateness) Late() bool {
	if !l.mu.TryLock() {
		return l.late.Load() // another caller is reading the histogram
	}
	defer l.mu.Unlock()
	now := l.clock.Now()
	if now.Sub(l.sampledAt) >= liveLateSample {
		l.sampledAt = now
		if over := l.read(); over != l.over {
			l.over, l.lateAt = over, now
		}
	}
	late := !l.lateAt.IsZero() && now.Sub(l.lateAt) < l.hold
	l.late.Store(late)
	return late
}

// read returns how many ticks the histogram observed later than threshold.
func (l *LiveLateness) read() uint64 {
	var m dto.Metric
	if err := l.lateness.Write(&m); err != nil {
		return l.over
	}
	h := m.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == l.threshold {
			return h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	return l.over
}
