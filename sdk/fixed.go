package sdk

import "math/bits"

// Fixed is a signed 16.16 fixed-point number: integer maths gives the same bits
// on every machine, which floats in game state do not guarantee (fused
// multiply-add, different libm). Products and quotients go through int64.
type Fixed int32

// Fixed-point constants.
const (
	FixedShift       = 16
	FixedOne   Fixed = 1 << FixedShift
	FixedHalf  Fixed = FixedOne / 2
)

// FixedInt converts an integer to Fixed.
func FixedInt(i int) Fixed { return Fixed(i << FixedShift) }

// FixedFrac returns num/den as Fixed (0 when den is 0).
func FixedFrac(num, den int) Fixed {
	if den == 0 {
		return 0
	}
	return Fixed(int64(num) << FixedShift / int64(den))
}

// Int returns f rounded toward negative infinity.
func (f Fixed) Int() int { return int(f >> FixedShift) }

// Round returns f rounded to the nearest integer (halves up).
func (f Fixed) Round() int { return int((f + FixedHalf) >> FixedShift) }

// Frac returns the fractional part of f, in [0, FixedOne).
func (f Fixed) Frac() Fixed { return f & (FixedOne - 1) }

// Mul returns f×g.
func (f Fixed) Mul(g Fixed) Fixed { return Fixed(int64(f) * int64(g) >> FixedShift) }

// Div returns f/g, saturating to the largest magnitude when g is 0 so that a
// division by zero never traps.
func (f Fixed) Div(g Fixed) Fixed {
	if g == 0 {
		if f < 0 {
			return -0x7FFFFFFF
		}
		return 0x7FFFFFFF
	}
	q := int64(f) << FixedShift / int64(g)
	switch {
	case q > 0x7FFFFFFF:
		return 0x7FFFFFFF
	case q < -0x7FFFFFFF:
		return -0x7FFFFFFF
	}
	return Fixed(q)
}

// Abs returns |f|.
func (f Fixed) Abs() Fixed {
	if f < 0 {
		return -f
	}
	return f
}

// Isqrt returns the integer square root of v (floor).
func Isqrt(v uint64) uint64 {
	if v < 2 {
		return v
	}
	// Newton's method from an over-estimate (a power of two ≥ √v) converges
	// monotonically downwards, and x + v/x cannot overflow from there.
	x := uint64(1) << ((bits.Len64(v) + 1) / 2)
	y := (x + v/x) / 2
	for y < x {
		x = y
		y = (x + v/x) / 2
	}
	return x
}
