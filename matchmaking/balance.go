package matchmaking

import (
	"cmp"
	"slices"
)

// Search budgets, in nodes visited. Both searches are exact within them; the
// budgets only bound pathological inputs (many teams, many mixed parties).
const (
	// packBudget bounds the search for a way to fit parties into teams;
	// past it a party is refused (it may join another match).
	packBudget = 10_000
	// balanceBudget bounds the search for the most balanced teams. It
	// covers every split of up to 8 players into any number of teams and of
	// 2 teams of up to 8; past it the best split found so far is improved
	// by swapping equal-sized parties between teams.
	balanceBudget = 20_000
)

// packer finds a way to put parties of the given sizes into teams.
type packer struct {
	sizes []int // input
	order []int
	bins  []int // output, aligned with sizes
	room  []int
	nodes int
}

// pack assigns each of p.sizes to one of teams teams of teamSize seats, and
// reports whether it found a way within packBudget.
func (p *packer) pack(teams, teamSize int) ([]int, bool) {
	p.order = p.order[:0]
	for i := range p.sizes {
		p.order = append(p.order, i)
	}
	// Largest first: the hard ones decide.
	slices.SortStableFunc(p.order, func(a, b int) int { return cmp.Compare(p.sizes[b], p.sizes[a]) })
	p.bins = slices.Grow(p.bins[:0], len(p.sizes))[:len(p.sizes)]
	p.room = slices.Grow(p.room[:0], teams)[:teams]
	for t := range p.room {
		p.room[t] = teamSize
	}
	p.nodes = 0
	return p.bins, p.dfs(0)
}

func (p *packer) dfs(k int) bool {
	if k == len(p.order) {
		return true
	}
	if p.nodes++; p.nodes > packBudget {
		return false
	}
	i := p.order[k]
	size := p.sizes[i]
	for t, r := range p.room {
		// Teams with equal room are interchangeable: try only the first.
		if r < size || slices.Contains(p.room[:t], r) {
			continue
		}
		p.room[t] -= size
		p.bins[i] = t
		if p.dfs(k + 1) {
			return true
		}
		p.room[t] += size
	}
	return false
}

// balancer splits a match's parties into teams with the smallest difference
// between the highest and lowest team rating sum.
type balancer struct {
	teamSize  int
	botRating float64
	size      []int
	sum       []float64
	order     []int // parties, largest and strongest first
	cur, best []int // team of each party
	fill      []int
	sums      []float64
	bestObj   float64
	remaining []float64 // rating sum of the parties from order[k] on
	full      bool      // no bots: every team ends full
	nodes     int
}

// balance returns the team of each of f.chosen, starting from the feasible
// split in f.bin.
func (b *balancer) balance(f *former, botRating float64) []int {
	n, teams := len(f.chosen), f.rules.Teams
	b.teamSize, b.botRating = f.rules.TeamSize, botRating
	b.size, b.sum = b.size[:0], b.sum[:0]
	total := 0
	for _, c := range f.chosen {
		b.size = append(b.size, f.e[c].size)
		b.sum = append(b.sum, f.e[c].sum)
		total += f.e[c].size
	}
	b.full = total == f.seats
	b.best = append(b.best[:0], f.bin...)
	b.cur = slices.Grow(b.cur[:0], n)[:n]
	b.fill = slices.Grow(b.fill[:0], teams)[:teams]
	b.sums = slices.Grow(b.sums[:0], teams)[:teams]
	b.bestObj = b.objective(b.best)
	if teams == 1 || b.bestObj == 0 {
		return b.best
	}

	b.order = b.order[:0]
	for i := range n {
		b.order = append(b.order, i)
	}
	slices.SortStableFunc(b.order, func(x, y int) int {
		if c := cmp.Compare(b.size[y], b.size[x]); c != 0 {
			return c
		}
		return cmp.Compare(b.sum[y], b.sum[x])
	})
	b.remaining = slices.Grow(b.remaining[:0], n+1)[:n+1]
	b.remaining[n] = 0
	for k := n - 1; k >= 0; k-- {
		b.remaining[k] = b.remaining[k+1] + b.sum[b.order[k]]
	}
	clear(b.fill)
	clear(b.sums)
	b.nodes = 0
	b.dfs(0)
	b.improve()
	return b.best
}

// objective is the spread of team rating sums (bots at botRating) of split.
func (b *balancer) objective(split []int) float64 {
	clear(b.fill)
	clear(b.sums)
	for i, t := range split {
		b.fill[t] += b.size[i]
		b.sums[t] += b.sum[i]
	}
	lo, hi := inf, -inf
	for t, s := range b.sums {
		s += float64(b.teamSize-b.fill[t]) * b.botRating
		lo, hi = min(lo, s), max(hi, s)
	}
	return hi - lo
}

func (b *balancer) dfs(k int) {
	if b.nodes++; b.nodes > balanceBudget || b.bestObj == 0 {
		return
	}
	if b.full {
		// Whatever comes, the lowest team gains at most what remains.
		lo, hi := inf, -inf
		for _, s := range b.sums {
			lo, hi = min(lo, s), max(hi, s)
		}
		if hi-lo-b.remaining[k] >= b.bestObj {
			return
		}
	}
	if k == len(b.order) {
		lo, hi := inf, -inf
		for t, s := range b.sums {
			s += float64(b.teamSize-b.fill[t]) * b.botRating
			lo, hi = min(lo, s), max(hi, s)
		}
		if hi-lo < b.bestObj {
			b.bestObj = hi - lo
			copy(b.best, b.cur)
		}
		return
	}
	i := b.order[k]
	emptyTried := false
	for t := range b.fill {
		if b.fill[t]+b.size[i] > b.teamSize {
			continue
		}
		if b.fill[t] == 0 { // empty teams are interchangeable
			if emptyTried {
				continue
			}
			emptyTried = true
		}
		b.fill[t] += b.size[i]
		b.sums[t] += b.sum[i]
		b.cur[i] = t
		b.dfs(k + 1)
		b.fill[t] -= b.size[i]
		b.sums[t] -= b.sum[i]
	}
}

// improve swaps equal-sized parties between teams while that lowers the
// objective, so the result is never worse than one swap away from better.
func (b *balancer) improve() {
	for pass := 0; pass < 100; pass++ {
		improved := false
		for i := range b.best {
			for j := i + 1; j < len(b.best); j++ {
				if b.best[i] == b.best[j] || b.size[i] != b.size[j] {
					continue
				}
				b.best[i], b.best[j] = b.best[j], b.best[i]
				if obj := b.objective(b.best); obj < b.bestObj-1e-9 {
					b.bestObj, improved = obj, true
				} else {
					b.best[i], b.best[j] = b.best[j], b.best[i]
				}
			}
		}
		if !improved {
			return
		}
	}
}
