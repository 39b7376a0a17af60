package sdk

import (
	"math"
	"testing"
)

func TestTrig(t *testing.T) {
	if Sin(0) != 0 || Sin(Angle90) != FixedOne || Sin(Angle180) != 0 || Sin(Angle270) != -FixedOne {
		t.Fatalf("cardinal sines: %d %d %d %d", Sin(0), Sin(Angle90), Sin(Angle180), Sin(Angle270))
	}
	if Cos(0) != FixedOne || Cos(Angle90) != 0 || Cos(Angle180) != -FixedOne {
		t.Fatal("cardinal cosines")
	}
	for a := 0; a < 65536; a += 16 {
		want := math.Sin(float64(a) * 2 * math.Pi / 65536)
		if got := float64(Sin(Angle(a))) / float64(FixedOne); math.Abs(got-want) > 1.0/65536 {
			t.Fatalf("Sin(%d) = %v, want %v", a, got, want)
		}
		s, c := int64(Sin(Angle(a))), int64(Cos(Angle(a)))
		if n := s*s + c*c; n < (1<<32)-(1<<18) || n > (1<<32)+(1<<18) {
			t.Fatalf("sin²+cos² at %d = %v", a, float64(n)/(1<<32))
		}
	}
	if AngleDegrees(90) != Angle90 || AngleDegrees(-90) != Angle270 || AngleDegrees(450) != Angle90 {
		t.Error("AngleDegrees")
	}
}
