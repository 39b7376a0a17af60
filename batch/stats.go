package batch

import (
	"cmp"
	"math"
	"slices"
)

// z95 is the standard normal quantile of a two-sided 95 % interval.
const z95 = 1.959963984540054

// Wilson returns the Wilson score interval of a proportion of wins out of n
// at 95 % confidence (E. B. Wilson, "Probable inference, the law of
// succession, and statistical inference", J. Am. Stat. Assoc. 22 (1927),
// 209–212; see also Brown, Cai & DasGupta, "Interval Estimation for a
// Binomial Proportion", Statistical Science 16 (2001), 101–133, who
// recommend it over the normal (Wald) interval, which collapses to zero width
// at 0 or n wins and undercovers for small n). n = 0 gives [0, 1].
func Wilson(wins, n int) (lo, hi float64) {
	if n <= 0 {
		return 0, 1
	}
	p := float64(wins) / float64(n)
	z2 := z95 * z95
	nf := float64(n)
	den := 1 + z2/nf
	center := (p + z2/(2*nf)) / den
	half := z95 / den * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return max(center-half, 0), min(center+half, 1)
}

// WinRate is how often one side won in a group of games.
type WinRate struct {
	// Map is the group ("" for every map).
	Map string
	// Side is the winning slot (-1: no winner: draws and failed games).
	Side  int
	Wins  int
	Games int
	// Rate is Wins/Games; Lo and Hi its 95 % Wilson score interval.
	Rate, Lo, Hi float64
}

// Summary is what a run's results say about its sides.
type Summary struct {
	Games, Failed, TimedOut int
	// BySide has the win rates of each side over every map, by side.
	BySide []WinRate
	// ByMap has them per map, by map then side.
	ByMap []WinRate
}

// Summarize counts wins per side (the winning slot of each game's result),
// over all maps and per map, with Wilson score intervals.
func Summarize(results []Result) Summary {
	var s Summary
	type key struct {
		m    string
		side int
	}
	wins := map[key]int{}
	games := map[string]int{}
	sides := map[int]bool{}
	maps := map[string]bool{}
	for _, r := range results {
		s.Games++
		if r.Error != "" {
			s.Failed++
		}
		if r.TimedOut {
			s.TimedOut++
		}
		w := r.Winner
		if r.Error != "" {
			w = -1
		}
		wins[key{"", w}]++
		wins[key{r.MapName, w}]++
		games[""]++
		games[r.MapName]++
		sides[w] = true
		maps[r.MapName] = true
	}
	rate := func(m string, side int) WinRate {
		n, k := games[m], wins[key{m, side}]
		lo, hi := Wilson(k, n)
		wr := WinRate{Map: m, Side: side, Wins: k, Games: n, Lo: lo, Hi: hi}
		if n > 0 {
			wr.Rate = float64(k) / float64(n)
		}
		return wr
	}
	ss := make([]int, 0, len(sides))
	for side := range sides {
		ss = append(ss, side)
	}
	slices.Sort(ss)
	ms := make([]string, 0, len(maps))
	for m := range maps {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, cmp.Compare)
	for _, side := range ss {
		s.BySide = append(s.BySide, rate("", side))
	}
	if len(ms) > 1 {
		for _, m := range ms {
			for _, side := range ss {
				s.ByMap = append(s.ByMap, rate(m, side))
			}
		}
	}
	return s
}
