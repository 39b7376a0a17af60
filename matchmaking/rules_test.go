package matchmaking

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

var twoRegions = map[string]float64{"eu": 80, "us": 100}

func TestDefaultRulesValid(t *testing.T) {
	r := DefaultRules("acme", "duel", twoRegions)
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.Seats() != 8 {
		t.Fatalf("Seats = %d", r.Seats())
	}
}

func TestRulesValidate(t *testing.T) {
	mod := func(f func(*Rules)) Rules {
		r := DefaultRules("acme", "duel", twoRegions)
		f(&r)
		return r
	}
	cases := map[string]Rules{
		"no tenant":        mod(func(r *Rules) { r.Tenant = "" }),
		"long mode":        mod(func(r *Rules) { r.Mode = strings.Repeat("m", MaxIDLen+1) }),
		"no mode":          mod(func(r *Rules) { r.Mode = "" }),
		"zero team size":   mod(func(r *Rules) { r.TeamSize = 0 }),
		"negative teams":   mod(func(r *Rules) { r.Teams = -2 }),
		"too many seats":   mod(func(r *Rules) { r.Teams, r.TeamSize = 20, 10 }),
		"one seat":         mod(func(r *Rules) { r.Teams, r.TeamSize = 1, 1 }),
		"NaN band":         mod(func(r *Rules) { r.BandStart = math.NaN() }),
		"negative band":    mod(func(r *Rules) { r.BandStart = -1 }),
		"infinite step":    mod(func(r *Rules) { r.BandStep = math.Inf(1) }),
		"cap below start":  mod(func(r *Rules) { r.BandCap = 50 }),
		"absurd cap":       mod(func(r *Rules) { r.BandCap = 1e9 }),
		"zero interval":    mod(func(r *Rules) { r.BandInterval = 0 }),
		"zero max wait":    mod(func(r *Rules) { r.MaxWait = 0 }),
		"no regions":       mod(func(r *Rules) { r.MaxRTT = nil }),
		"empty region":     mod(func(r *Rules) { r.MaxRTT = map[string]float64{"": 50} }),
		"zero RTT limit":   mod(func(r *Rules) { r.MaxRTT = map[string]float64{"eu": 0} }),
		"NaN RTT limit":    mod(func(r *Rules) { r.MaxRTT = map[string]float64{"eu": math.NaN()} }),
		"absurd RTT limit": mod(func(r *Rules) { r.MaxRTT = map[string]float64{"eu": 1e6} }),
		"too many regions": mod(func(r *Rules) {
			r.MaxRTT = map[string]float64{}
			for i := range MaxRegions + 1 {
				r.MaxRTT[string(rune('A'+i))] = 50
			}
		}),
	}
	for name, r := range cases {
		err := r.Validate()
		if !errors.Is(err, ErrInvalidRules) {
			t.Errorf("%s: Validate = %v, want ErrInvalidRules", name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "matchmaking: ") {
			t.Errorf("%s: message %q lacks the package prefix", name, err)
		}
		if _, err := Form(time.Now(), nil, r); !errors.Is(err, ErrInvalidRules) {
			t.Errorf("%s: Form accepted the rules: %v", name, err)
		}
	}
}

func TestBand(t *testing.T) {
	r := DefaultRules("acme", "duel", twoRegions)
	for _, c := range []struct {
		elapsed time.Duration
		want    float64
	}{
		{-time.Hour, 100},
		{0, 100},
		{4999 * time.Millisecond, 100},
		{5 * time.Second, 150},
		{12 * time.Second, 200},
		{44999 * time.Millisecond, 500},
		{45 * time.Second, 550},
		{time.Hour, 550},
		{math.MaxInt64, 550},
	} {
		if got := r.Band(c.elapsed); got != c.want {
			t.Errorf("Band(%v) = %v, want %v", c.elapsed, got, c.want)
		}
	}
	r.BandStep = 0
	if got := r.Band(time.Hour); got != 100 {
		t.Errorf("Band with no step = %v", got)
	}
}
