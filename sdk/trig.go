package sdk

// Angle is a binary angle: a full turn is 65536, so adding and subtracting wrap
// around for free and never leave the valid range.
type Angle uint16

// Common angles.
const (
	Angle90  Angle = 1 << 14
	Angle180 Angle = 1 << 15
	Angle270 Angle = 3 << 14
)

// AngleDegrees converts whole degrees to an Angle.
func AngleDegrees(deg int) Angle { return Angle(int64(deg) * 65536 / 360) }

// trigBits is the table resolution: 4096 entries per turn (0.088°).
const trigBits = 12

var sinTable = makeSinTable()

// Sin returns sin(a) as Fixed, from a 4096-entry table (a is truncated to it).
func Sin(a Angle) Fixed { return sinTable[a>>(16-trigBits)] }

// Cos returns cos(a) as Fixed.
func Cos(a Angle) Fixed { return sinTable[(a+Angle90)>>(16-trigBits)] }

// makeSinTable builds the table with integer arithmetic only (a Taylor series in
// 2.28 fixed point), so it is bit-identical on every platform and compiler. Using
// math.Sin would be deterministic within one wasm binary but not necessarily
// between a native build and the wasm build.
func makeSinTable() *[1 << trigBits]Fixed {
	const (
		n       = 1 << trigBits
		quarter = n / 4
		scale   = 28
		piFix   = 843314857 // round(π × 2^28)
	)
	var t [n]Fixed
	for i := 0; i <= quarter; i++ {
		x := int64(i) * piFix / (n / 2) // angle in radians, 2.28
		x2 := x * x >> scale
		term, sum := x, x
		for k := int64(1); k <= 10; k++ {
			term = -(term * x2 >> scale) / ((2 * k) * (2*k + 1))
			sum += term
		}
		v := Fixed((sum + 1<<(scale-FixedShift-1)) >> (scale - FixedShift))
		t[i] = v
		t[n/2-i] = v
		t[(n/2+i)%n] = -v
		t[(n-i)%n] = -v
	}
	return &t
}
