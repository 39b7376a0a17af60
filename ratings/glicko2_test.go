package ratings

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6f, want %.6f ± %g", what, got, want, tol)
	}
}

// paperGames are the games of Glickman's "Example of the Glicko-2 system".
var paperGames = []Result{
	{Opponent: Rating{1400, 30, 0.06}, Score: 1},
	{Opponent: Rating{1550, 100, 0.06}, Score: 0},
	{Opponent: Rating{1700, 300, 0.06}, Score: 0},
}

func TestPaperExample(t *testing.T) {
	got, err := System{Tau: 0.5}.Update(Rating{1500, 200, 0.06}, paperGames)
	if err != nil {
		t.Fatal(err)
	}
	// The published numbers, computed with rounded intermediates (μ' =
	// -0.2069, φ' = 0.8722), hence the rating's wider tolerance: unrounded,
	// the rating is 1464.0507.
	near(t, "rating", got.Rating, 1464.06, 0.02)
	near(t, "RD", got.RD, 151.52, 0.01)
	near(t, "volatility", got.Volatility, 0.05999, 0.00001)
	// Unrounded, as other implementations compute it.
	near(t, "rating (unrounded)", got.Rating, 1464.0506705, 1e-6)
	near(t, "RD (unrounded)", got.RD, 151.5165241, 1e-6)
	near(t, "volatility (unrounded)", got.Volatility, 0.0599959843, 1e-9)
}

func TestZeroSystemIsDefaults(t *testing.T) {
	a, err := System{}.Update(Rating{1500, 200, 0.06}, paperGames)
	if err != nil {
		t.Fatal(err)
	}
	b, err := System{Tau: DefaultTau, MaxRD: DefaultMaxRD}.Update(Rating{1500, 200, 0.06}, paperGames)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("zero System %+v differs from defaults %+v", a, b)
	}
	if n := New(); n != (Rating{1500, 350, 0.06}) {
		t.Fatalf("New() = %+v", n)
	}
}

func TestIdleGrowsRD(t *testing.T) {
	s := System{}
	p := Rating{1620, 200, 0.06}
	one, err := s.Update(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := math.Sqrt(200*200 + math.Pow(173.7178*0.06, 2)) // 200.2714
	near(t, "RD after an idle period", one.RD, want, 1e-9)
	if one.Rating != p.Rating || one.Volatility != p.Volatility {
		t.Errorf("idle period changed rating or volatility: %+v", one)
	}
	idle1, err := s.Idle(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if idle1 != one {
		t.Errorf("Idle(p, 1) = %+v, Update(p, nil) = %+v", idle1, one)
	}
	ten, err := s.Idle(p, 10)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "RD after 10 idle periods", ten.RD, math.Sqrt(200*200+10*math.Pow(173.7178*0.06, 2)), 1e-9)
	// Ten single periods give the same.
	step := p
	for range 10 {
		if step, err = s.Update(step, nil); err != nil {
			t.Fatal(err)
		}
	}
	near(t, "RD after 10 single idle periods", step.RD, ten.RD, 1e-9)

	capped, err := s.Idle(p, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if capped.RD != DefaultMaxRD {
		t.Errorf("RD after a long absence = %v, want the cap %v", capped.RD, DefaultMaxRD)
	}
	zero, err := s.Idle(p, 0)
	if err != nil || zero != p {
		t.Errorf("Idle(p, 0) = %+v, %v; want p unchanged", zero, err)
	}
}

func TestInvalidInputs(t *testing.T) {
	good := Rating{1500, 200, 0.06}
	nan := math.NaN()
	inf := math.Inf(1)
	cases := []struct {
		name  string
		s     System
		p     Rating
		games []Result
	}{
		{"NaN rating", System{}, Rating{nan, 200, 0.06}, nil},
		{"infinite rating", System{}, Rating{inf, 200, 0.06}, nil},
		{"negative rating", System{}, Rating{-1, 200, 0.06}, nil},
		{"absurd rating", System{}, Rating{1e6, 200, 0.06}, nil},
		{"negative RD", System{}, Rating{1500, -10, 0.06}, nil},
		{"zero RD", System{}, Rating{1500, 0, 0.06}, nil},
		{"RD above cap", System{}, Rating{1500, 351, 0.06}, nil},
		{"NaN RD", System{}, Rating{1500, nan, 0.06}, nil},
		{"zero volatility", System{}, Rating{1500, 200, 0}, nil},
		{"absurd volatility", System{}, Rating{1500, 200, 5}, nil},
		{"NaN volatility", System{}, Rating{1500, 200, nan}, nil},
		{"bad opponent", System{}, good, []Result{{Opponent: Rating{1500, -1, 0.06}, Score: 1}}},
		{"score above 1", System{}, good, []Result{{Opponent: good, Score: 1.5}}},
		{"negative score", System{}, good, []Result{{Opponent: good, Score: -0.5}}},
		{"NaN score", System{}, good, []Result{{Opponent: good, Score: nan}}},
		{"negative tau", System{Tau: -1}, good, nil},
		{"NaN tau", System{Tau: nan}, good, nil},
		{"absurd tau", System{Tau: 100}, good, nil},
		{"negative MaxRD", System{MaxRD: -1}, good, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.s.Update(c.p, c.games)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Update = %+v, %v; want an error wrapping ErrInvalid", got, err)
			}
			if _, err := c.s.Idle(c.p, 1); c.games == nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Idle accepted it: %v", err)
			}
		})
	}
	if _, err := (System{}).Idle(good, -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Idle with negative periods: %v", err)
	}
}

// Any valid inputs, however extreme, give a valid rating: no NaN, nothing out
// of bounds. A win never lowers a rating and a loss never raises it.
func TestExtremeInputsStayValid(t *testing.T) {
	s := System{}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() Rating {
		edges := []float64{MinRating, MaxRating, 1500}
		r := Rating{
			Rating:     rng.Float64() * MaxRating,
			RD:         1e-6 + rng.Float64()*(DefaultMaxRD-1e-6),
			Volatility: 1e-6 + rng.Float64()*(MaxVolatility-1e-6),
		}
		if rng.IntN(3) == 0 {
			r.Rating = edges[rng.IntN(len(edges))]
		}
		if rng.IntN(4) == 0 {
			r.RD = []float64{1e-6, DefaultMaxRD}[rng.IntN(2)]
		}
		return r
	}
	for i := range 20000 {
		p := pick()
		n := 1 + rng.IntN(5)
		games := make([]Result, n)
		score := float64(rng.IntN(3)) / 2
		for j := range games {
			games[j] = Result{Opponent: pick(), Score: score}
		}
		got, err := s.Update(p, games)
		if err != nil {
			t.Fatalf("case %d: Update(%+v, %+v): %v", i, p, games, err)
		}
		if err := s.ValidateRating(got); err != nil {
			t.Fatalf("case %d: Update(%+v, %+v) = %+v, invalid: %v", i, p, games, got, err)
		}
		if score == 1 && got.Rating < p.Rating || score == 0 && got.Rating > p.Rating {
			t.Fatalf("case %d: score %v moved %v to %v", i, score, p.Rating, got.Rating)
		}
	}
}

func TestExpected(t *testing.T) {
	a := Rating{1500, 200, 0.06}
	if e := Expected(a, a); math.Abs(e-0.5) > 1e-12 {
		t.Errorf("Expected against an equal = %v", e)
	}
	// Paper, step 3: E for the 1400/30 opponent is 0.639.
	near(t, "E vs 1400/30", Expected(a, paperGames[0].Opponent), 0.639, 0.001)
	near(t, "E vs 1700/300", Expected(a, paperGames[2].Opponent), 0.303, 0.001)
	hi, lo := Rating{1800, 50, 0.06}, Rating{1200, 50, 0.06}
	if Expected(hi, lo)+Expected(lo, hi) < 0.999 || Expected(hi, lo) < 0.9 {
		t.Errorf("Expected(hi, lo) = %v, Expected(lo, hi) = %v", Expected(hi, lo), Expected(lo, hi))
	}
}

func TestUpdateDoesNotTouchInput(t *testing.T) {
	games := slices.Clone(paperGames)
	if _, err := (System{}).Update(Rating{1500, 200, 0.06}, games); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(games, paperGames) {
		t.Fatal("Update modified its games")
	}
}
