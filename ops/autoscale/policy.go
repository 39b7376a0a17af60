package autoscale

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("autoscale: invalid configuration")

// Policy decides how many sim nodes a region's fleet should run, from the
// region's free sessions:
//
//   - expected free = free sessions + SessionsPerNode × replicas that have not
//     registered yet (replicas − registered nodes, if positive): starting nodes
//     bring their room, so a slow start is not answered by a second scale-up;
//   - expected free < ScaleUpBelow: add ⌈(ScaleUpBelow − expected)/SessionsPerNode⌉
//     replicas, the fewest that reach ScaleUpBelow;
//   - expected free > DrainAbove: remove ⌊(expected − DrainAbove)/SessionsPerNode⌋
//     replicas, the most that leave at least DrainAbove free (a drained node's
//     capacity goes, its games move into the others' free sessions), so
//     nothing happens until a whole node's room is spare;
//   - then clamp to [MinReplicas, MaxReplicas].
//
// At rest the free sessions are in [ScaleUpBelow, DrainAbove + SessionsPerNode).
// DrainAbove ≥ ScaleUpBelow, so a scale-up never lands where a drain starts
// nor a drain below ScaleUpBelow: the policy does not flap.
type Policy struct {
	// SessionsPerNode is the capacity of one sim node (its --capacity).
	SessionsPerNode int
	// ScaleUpBelow: fewer free sessions than this adds nodes. 0 never scales up
	// (but MinReplicas still holds).
	ScaleUpBelow int
	// DrainAbove: more free sessions than this, by a whole node's room at
	// least, removes (drains) nodes; never fewer than this are left free.
	DrainAbove int
	// MinReplicas and MaxReplicas bound the answer.
	MinReplicas, MaxReplicas int32
}

// Validate reports what is wrong with p, wrapping ErrInvalidConfig.
func (p Policy) Validate() error {
	switch {
	case p.SessionsPerNode < 1 || p.SessionsPerNode > maxSessions:
		return fmt.Errorf("%w: SessionsPerNode must be in [1, %d], got %d", ErrInvalidConfig, maxSessions, p.SessionsPerNode)
	case p.ScaleUpBelow < 0 || p.ScaleUpBelow > maxSessions:
		return fmt.Errorf("%w: ScaleUpBelow must be in [0, %d], got %d", ErrInvalidConfig, maxSessions, p.ScaleUpBelow)
	case p.DrainAbove > maxSessions:
		return fmt.Errorf("%w: DrainAbove must be at most %d, got %d", ErrInvalidConfig, maxSessions, p.DrainAbove)
	case p.DrainAbove < p.ScaleUpBelow:
		return fmt.Errorf("%w: DrainAbove (%d) must be at least ScaleUpBelow (%d), or scaling would flap",
			ErrInvalidConfig, p.DrainAbove, p.ScaleUpBelow)
	case p.MinReplicas < 0:
		return fmt.Errorf("%w: MinReplicas must not be negative, got %d", ErrInvalidConfig, p.MinReplicas)
	case p.MaxReplicas < 1 || p.MaxReplicas < p.MinReplicas:
		return fmt.Errorf("%w: MaxReplicas (%d) must be at least 1 and at least MinReplicas (%d)", ErrInvalidConfig, p.MaxReplicas, p.MinReplicas)
	}
	return nil
}

// maxSessions bounds the policy's session counts (and keeps its arithmetic
// far from overflow).
const maxSessions = math.MaxInt32

// Replicas is the replica count p wants for a fleet running current replicas
// in a region with room f. p must be valid; current must not be negative.
func (p Policy) Replicas(current int32, f Free) int32 {
	spn := int64(p.SessionsPerNode)
	// A Source's count beyond 2^40 is no real fleet; capping it keeps the sum
	// below from overflowing.
	expected := min(int64(max(f.Sessions, 0)), 1<<40)
	if pending := int64(current) - int64(f.Nodes); pending > 0 {
		expected += pending * spn
	}
	want := int64(current)
	switch {
	case expected < int64(p.ScaleUpBelow):
		want += (int64(p.ScaleUpBelow) - expected + spn - 1) / spn
	case expected > int64(p.DrainAbove):
		want -= (expected - int64(p.DrainAbove)) / spn
	}
	return int32(min(max(want, int64(p.MinReplicas)), int64(p.MaxReplicas)))
}
