package matchmaking

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A party that no party of the queue can complete must not take the place
// of parties that make a match: the bench's queues ran out of solo players
// and formed no match at all from hundreds of parties of 4.
func TestPartyNobodyCanCompleteDoesNotBlock(t *testing.T) {
	r := rules4v4()
	quads := func(id string, waited time.Duration, rating float64) Ticket {
		return party(id, waited, eu, rating, rating, rating, rating)
	}
	trio1 := party("trio1", 9*time.Second, eu, 1500, 1500, 1500)
	trio2 := party("trio2", 8*time.Second, eu, 1500, 1500, 1500)
	q1, q2 := quads("q1", 7*time.Second, 1500), quads("q2", 6*time.Second, 1500)
	for _, c := range []struct {
		why     string
		tickets []Ticket
		want    []string // the one match's tickets
	}{
		{"the trios are older than the parties of 4 and each fits beside one; only a solo could complete a trio, and there is none",
			[]Ticket{trio1, trio2, q1, q2}, []string{"q1", "q2"}},
		{"a solo who could complete a trio but is outside every band does not make the trio worth taking",
			[]Ticket{trio1, party("far", 8*time.Second, eu, 2500), trio2, q1, q2}, []string{"q1", "q2"}},
		{"with a solo in reach, the oldest trio is completed by it",
			[]Ticket{trio1, trio2, q1, q2, party("solo", 5*time.Second, eu, 1500)}, []string{"trio1", "q1", "solo"}},
	} {
		res := mustForm(t, c.tickets, r)
		if len(res.Matches) != 1 || !slices.Equal(res.Matches[0].Tickets, c.want) {
			t.Fatalf("%s: want %v matched; got %+v", c.why, c.want, res)
		}
	}
}

// Anchors no party size of the queue can complete are not built at all: a
// queue of parties of 3 and no solo costs one question per size, not a
// scan of the queue per anchor.
func TestAnchorsNobodyCanCompleteAreSkipped(t *testing.T) {
	r := rules4v4()
	var ts []Ticket
	for i := range 400 {
		ts = append(ts, party("trio"+itoa(i), time.Duration(i)*time.Millisecond, eu, 1500, 1500, 1500))
	}
	for i := range 4 {
		ts = append(ts, party("duo"+itoa(i), time.Second+time.Duration(i)*time.Millisecond, eu, 1500, 1500))
	}
	var builds, buildsAll int
	res, err := form(t0, ts, r, formOptions{builds: &builds})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, t0, ts, r, res)
	all, err := form(t0, ts, r, formOptions{builds: &buildsAll, noAnchorSkip: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 1 || len(res.Matches[0].Tickets) != 4 {
		t.Fatalf("want the four duos matched; got %+v", res.Matches)
	}
	if len(all.Matches) != len(res.Matches) || len(all.Searching) != len(res.Searching) {
		t.Fatalf("skipping anchors changed the result: %d/%d matches", len(res.Matches), len(all.Matches))
	}
	if builds > 4 || buildsAll < 400 {
		t.Fatalf("built %d anchors (%d without skipping); want at most the 4 duos", builds, buildsAll)
	}
}

// sizeFit's answers agree with a search that knows nothing of it: place the
// available parties one by one into teams, or leave them out.
func TestSizeFitAgreesWithPlacingEachParty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	asked, yes := 0, 0
	for range 3000 {
		teams, teamSize := 1+rng.IntN(3), 1+rng.IntN(5)
		s := newSizeFit(Rules{Teams: teams, TeamSize: teamSize}, nil)
		count := make([]int, teamSize+1)
		var parties []int
		for p := 1; p <= teamSize; p++ {
			count[p] = rng.IntN(4)
			for range count[p] {
				parties = append(parties, p)
			}
		}
		rooms := make([]int, teams)
		for i := range rooms {
			rooms[i] = rng.IntN(teamSize + 1)
		}
		want := placeEach(parties, rooms)
		if got := s.canFill(rooms, count); got != want {
			t.Fatalf("rooms %v, parties %v: canFill says %v, placing says %v", rooms, parties, got, want)
		}
		asked++
		if want {
			yes++
		}
	}
	if yes < asked/5 || yes > asked*4/5 {
		t.Fatalf("%d of %d questions were yes: the cases do not test both answers", yes, asked)
	}
}

// placeEach reports whether some of parties fill rooms exactly.
func placeEach(parties, rooms []int) bool {
	if len(parties) == 0 {
		for _, r := range rooms {
			if r != 0 {
				return false
			}
		}
		return true
	}
	p, rest := parties[0], parties[1:]
	if placeEach(rest, rooms) {
		return true
	}
	for i := range rooms {
		if rooms[i] >= p {
			rooms[i] -= p
			ok := placeEach(rest, rooms)
			rooms[i] += p
			if ok {
				return true
			}
		}
	}
	return false
}
