package sdk

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFixed(t *testing.T) {
	three, half := FixedInt(3), FixedHalf
	if got := three.Mul(half); got != FixedFrac(3, 2) {
		t.Errorf("3×0.5 = %v", got)
	}
	if got := three.Div(FixedInt(2)); got != FixedFrac(3, 2) {
		t.Errorf("3/2 = %v", got)
	}
	if FixedFrac(-3, 2).Int() != -2 || FixedFrac(-3, 2).Round() != -1 || FixedFrac(5, 2).Round() != 3 {
		t.Error("Int floors, Round rounds halves up")
	}
	if FixedFrac(7, 4).Frac() != FixedFrac(3, 4) || FixedFrac(-1, 4).Frac() != FixedFrac(3, 4) {
		t.Error("Frac")
	}
	if FixedInt(-2).Abs() != FixedInt(2) || FixedFrac(1, 0) != 0 {
		t.Error("Abs / FixedFrac by zero")
	}
	if FixedInt(1).Div(0) != 0x7FFFFFFF || FixedInt(-1).Div(0) != -0x7FFFFFFF {
		t.Error("Div by zero must saturate")
	}
	if FixedInt(30000).Div(FixedFrac(1, 100)) != 0x7FFFFFFF {
		t.Error("Div overflow must saturate")
	}
}

func TestIsqrt(t *testing.T) {
	for v := uint64(0); v < 100000; v++ {
		if r := Isqrt(v); r*r > v || (r+1)*(r+1) <= v {
			t.Fatalf("Isqrt(%d) = %d", v, r)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		v := rng.Uint64() >> (rng.IntN(64))
		r := Isqrt(v)
		if r > math.MaxUint32 || r*r > v || (r+1 <= math.MaxUint32 && (r+1)*(r+1) <= v) {
			t.Fatalf("Isqrt(%d) = %d", v, r)
		}
	}
	if Isqrt(math.MaxUint64) != math.MaxUint32 {
		t.Fatal("Isqrt(MaxUint64)")
	}
}
