package sdk

import "math/bits"

// Rand is a small deterministic PRNG (SplitMix64). Its whole state is one uint64,
// so games can hash and checkpoint it; the zero value is a valid generator. Seed
// it from the match seed; never from the clock or WASI random_get.
type Rand struct {
	state uint64
}

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) Rand { return Rand{state: seed} }

// State returns the generator's state, for hashing and checkpoints.
func (r *Rand) State() uint64 { return r.state }

// SetState restores a state returned by State.
func (r *Rand) SetState(s uint64) { r.state = s }

// Uint64 returns the next 64 pseudo-random bits.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9E3779B97F4A7C15
	z := r.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Uint32 returns the next 32 pseudo-random bits.
func (r *Rand) Uint32() uint32 { return uint32(r.Uint64() >> 32) }

// Intn returns a number in [0, n). It returns 0 when n <= 0 instead of
// panicking, because a game must never trap on odd input.
func (r *Rand) Intn(n int) int {
	if n <= 0 {
		return 0
	}
	// Lemire's multiply-high: uniform enough for games, no division, no loop.
	hi, _ := bits.Mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// Range returns a number in [lo, hi]; lo when hi < lo.
func (r *Rand) Range(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.Intn(hi-lo+1)
}

// Chance reports true with probability num/den.
func (r *Rand) Chance(num, den int) bool { return r.Intn(den) < num }
