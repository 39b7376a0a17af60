package ratings

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestMatchResultsTwoTeams(t *testing.T) {
	a1, a2 := Rating{1500, 100, 0.06}, Rating{1600, 80, 0.06}
	b1, b2 := Rating{1550, 120, 0.06}, Rating{1450, 300, 0.06}
	teams := []Team{{Players: []Rating{a1, a2}, Place: 1}, {Players: []Rating{b1, b2}, Place: 2}}
	res, err := System{}.MatchResults(teams)
	if err != nil {
		t.Fatal(err)
	}
	wantA := []Result{{b1, 1}, {b2, 1}}
	wantB := []Result{{a1, 0}, {a2, 0}}
	for p := range 2 {
		if !slices.Equal(res[0][p], wantA) {
			t.Errorf("team A player %d: %+v, want %+v", p, res[0][p], wantA)
		}
		if !slices.Equal(res[1][p], wantB) {
			t.Errorf("team B player %d: %+v, want %+v", p, res[1][p], wantB)
		}
	}

	up, err := System{}.UpdateMatch(teams)
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range teams[0].Players {
		want, _ := System{}.Update(r, wantA)
		if up[0][p] != want {
			t.Errorf("winner %d: %+v, want %+v", p, up[0][p], want)
		}
		if up[0][p].Rating <= r.Rating || up[0][p].RD >= r.RD {
			t.Errorf("winner %d went from %+v to %+v", p, r, up[0][p])
		}
	}
	for p, r := range teams[1].Players {
		if up[1][p].Rating >= r.Rating {
			t.Errorf("loser %d went from %+v to %+v", p, r, up[1][p])
		}
	}
}

func TestMatchResultsFreeForAllWithTie(t *testing.T) {
	r := Rating{1500, 200, 0.06}
	teams := []Team{
		{Players: []Rating{r}, Place: 2},
		{Players: []Rating{r}, Place: 1},
		{Players: []Rating{r}, Place: 2},
	}
	res, err := System{}.MatchResults(teams)
	if err != nil {
		t.Fatal(err)
	}
	scores := func(games []Result) []float64 {
		var s []float64
		for _, g := range games {
			s = append(s, g.Score)
		}
		return s
	}
	for i, want := range [][]float64{{0, 0.5}, {1, 1}, {0.5, 0}} {
		if got := scores(res[i][0]); !slices.Equal(got, want) {
			t.Errorf("team %d scores %v, want %v", i, got, want)
		}
	}
	up, err := System{}.UpdateMatch(teams)
	if err != nil {
		t.Fatal(err)
	}
	if up[0][0] != up[2][0] {
		t.Errorf("tied players rated differently: %+v vs %+v", up[0][0], up[2][0])
	}
	if !(up[1][0].Rating > r.Rating && up[0][0].Rating < r.Rating) {
		t.Errorf("winner %v, tied %v from %v", up[1][0].Rating, up[0][0].Rating, r.Rating)
	}
}

func TestDrawBetweenEqualsChangesNoRating(t *testing.T) {
	r := Rating{1700, 90, 0.05}
	up, err := System{}.UpdateMatch([]Team{{Players: []Rating{r, r}, Place: 1}, {Players: []Rating{r, r}, Place: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range up {
		for _, got := range team {
			if math.Abs(got.Rating-r.Rating) > 1e-9 || got.RD >= r.RD {
				t.Errorf("draw between equals: %+v -> %+v", r, got)
			}
		}
	}
}

func TestMatchInvalid(t *testing.T) {
	r := New()
	big := make([]Rating, MaxMatchPlayers)
	for i := range big {
		big[i] = r
	}
	cases := map[string][]Team{
		"no teams":       nil,
		"one team":       {{Players: []Rating{r, r}}},
		"empty team":     {{Players: []Rating{r}}, {}},
		"bad rating":     {{Players: []Rating{r}}, {Players: []Rating{{Rating: math.NaN(), RD: 100, Volatility: 0.06}}}},
		"too many seats": {{Players: big}, {Players: []Rating{r}}},
	}
	for name, teams := range cases {
		if _, err := (System{}).UpdateMatch(teams); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := (System{Tau: -1}).MatchResults([]Team{{Players: []Rating{r}}, {Players: []Rating{r}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad system: %v", err)
	}
}

func TestPlaces(t *testing.T) {
	got, err := Places([]float64{10, 20, 20, 5, -3})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 1, 1, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("Places = %v, want %v", got, want)
	}
	if got, err := Places(nil); err != nil || len(got) != 0 {
		t.Errorf("Places(nil) = %v, %v", got, err)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(-1)} {
		if _, err := Places([]float64{1, bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Places with %v: %v", bad, err)
		}
	}
}
