package matchmaking

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestSimulate200PerSecond(t *testing.T) {
	r := DefaultRules("acme", "duel", map[string]float64{"eu": 80, "us": 80})
	rep, err := Simulate(r, 200, 3*time.Minute, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.TimeToMatchP99 > 20*time.Second {
		t.Errorf("p99 time to match %v, want ≤ 20 s", rep.TimeToMatchP99)
	}
	if rep.Tickets < 30000 || rep.Matched < rep.Tickets*95/100 {
		t.Errorf("%d tickets, %d matched", rep.Tickets, rep.Matched)
	}
	if rep.Tickets != rep.Matched+rep.TimedOut+rep.Searching+rep.Rejected {
		t.Errorf("tickets lost: %+v", rep)
	}
	if rep.RatingSpreadP99 > r.BandCap || rep.MaxRTTP99 > 80 || rep.BotSeats != 0 {
		t.Errorf("quality: %+v", rep)
	}
	again, err := Simulate(r, 200, 3*time.Minute, 1)
	if err != nil || again != rep {
		t.Errorf("same seed, different report: %+v", again)
	}
	other, err := Simulate(r, 200, 3*time.Minute, 2)
	if err != nil || other == rep {
		t.Errorf("different seed, same report")
	}
}

func TestSimulateQuietQueueWithBots(t *testing.T) {
	r := DefaultRules("acme", "duel", map[string]float64{"eu": 80})
	r.BotsFillAtTimeout = true
	rep, err := Simulate(r, 0.5, 10*time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.TimedOut != 0 || rep.BotSeats == 0 || rep.TimeToMatchP99 > r.MaxWait+SimScanInterval {
		t.Errorf("a quiet queue with bots: %+v", rep)
	}
}

func TestSimulateRejectsBadArguments(t *testing.T) {
	r := DefaultRules("acme", "duel", twoRegions)
	for _, c := range []struct {
		rules Rules
		rate  float64
		d     time.Duration
	}{
		{Rules{}, 10, time.Minute},
		{r, 0, time.Minute},
		{r, -1, time.Minute},
		{r, 1e9, time.Minute},
		{r, 10, 0},
		{r, 10, 48 * time.Hour},
		{r, 50_000, 24 * time.Hour},
	} {
		if _, err := Simulate(c.rules, c.rate, c.d, 1); err == nil {
			t.Errorf("Simulate(%v, %v) accepted", c.rate, c.d)
		}
	}
}

// benchQueue is a queue of n tickets from the simulation's population,
// enqueued over the last 30 s.
func benchQueue(n int) (Rules, []Ticket) {
	r := DefaultRules("acme", "duel", map[string]float64{"eu": 80, "us": 80})
	rng := rand.New(rand.NewPCG(5, 5))
	ts := make([]Ticket, 0, n)
	for i := range n {
		size := []int{1, 1, 1, 1, 1, 2, 2, 3, 4}[rng.IntN(9)]
		home := []string{"eu", "us"}[rng.IntN(2)]
		base := 1500 + 300*rng.NormFloat64()
		tk := Ticket{ID: "b" + itoa(i), Tenant: "acme", Mode: "duel", EnqueuedAt: t0.Add(-time.Duration(rng.Float64() * float64(30*time.Second)))}
		for j := range size {
			rtt := map[string]float64{"eu": 40 + 120*rng.Float64(), "us": 40 + 120*rng.Float64()}
			rtt[home] = 10 + 50*rng.Float64()
			tk.Party = append(tk.Party, Member{AccountID: tk.ID + "." + itoa(j), Rating: min(max(base+100*rng.NormFloat64(), 0), MaxRating), RTT: rtt})
		}
		ts = append(ts, tk)
	}
	return r, ts
}

func itoa(i int) string { return strconv.Itoa(i) }

func benchmarkForm(b *testing.B, n int) {
	r, ts := benchQueue(n)
	benchmarkTickets(b, r, ts)
}

func benchmarkTickets(b *testing.B, r Rules, ts []Ticket) {
	n := len(ts)
	matched := 0
	b.ReportAllocs()
	for b.Loop() {
		res, err := Form(t0, ts, r)
		if err != nil {
			b.Fatal(err)
		}
		matched += countTickets(res.Matches)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tickets/s")
	b.ReportMetric(float64(matched)/b.Elapsed().Seconds(), "matched/s")
}

func BenchmarkForm1000(b *testing.B)  { benchmarkForm(b, 1000) }
func BenchmarkForm3000(b *testing.B)  { benchmarkForm(b, 3000) }
func BenchmarkForm10000(b *testing.B) { benchmarkForm(b, 10000) }

func BenchmarkSimulate200PerSecondMinute(b *testing.B) {
	r := DefaultRules("acme", "duel", map[string]float64{"eu": 80, "us": 80})
	for b.Loop() {
		if _, err := Simulate(r, 200, time.Minute, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFormNoSolos3000 is a queue that has run out of solo players,
// as the bench's did at 5,000 tickets/s: parties of 3 only a solo could
// complete, beside parties of 2 and 4 that match among themselves.
func BenchmarkFormNoSolos3000(b *testing.B) {
	r, ts := benchQueue(3000)
	ts = slices.DeleteFunc(ts, func(tk Ticket) bool { return len(tk.Party) == 1 })
	benchmarkTickets(b, r, ts)
}
