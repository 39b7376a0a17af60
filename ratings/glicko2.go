// Package ratings computes players' skill ratings with Glicko-2 (Mark E.
// Glickman, "Example of the Glicko-2 system", glicko.net/glicko/glicko2.pdf).
//
// A Rating is three numbers on the familiar public scale: Rating (1500 for a
// new player), RD, the rating deviation (how unsure the system is: 350 for a
// new player, shrinking as they play) and Volatility (how erratic the player's
// results are, 0.06 to start). A Rating of 1650 with RD 50 says "very likely
// between 1550 and 1750" (±2 RD).
//
// Ratings change once per rating period. System.Update takes everything a
// player did in one period; a player who did not play still gets Update with
// no results (or System.Idle), which leaves Rating and Volatility alone and
// grows RD, so the system becomes less sure of players who stay away. Glickman
// recommends periods long enough for 10 to 15 games; games that rate after
// every match use one match per period, which works but moves ratings more.
//
// Team and free-for-all games are reduced to one-on-one results by
// System.MatchResults and System.UpdateMatch: every player is rated as having
// played every player of every other team (see MatchResults for the method
// and its source).
//
// All functions are pure and validate their inputs: NaN, infinities, negative
// or absurd deviations, ratings outside [MinRating, MaxRating] and scores
// outside [0, 1] return errors wrapping ErrInvalid instead of producing NaN.
package ratings

import (
	"errors"
	"fmt"
	"math"
)

// Bounds on the inputs the package accepts. A rating outside them is a bug or
// an attack, not a skill level; results are clamped into them so that every
// output is also a valid input.
const (
	MinRating = 0
	MaxRating = 10000
	// MaxVolatility bounds Volatility. Glickman's examples use 0.06; values
	// near 1 mean a player whose results are noise.
	MaxVolatility = 1.0
	// MaxTau bounds System.Tau; Glickman suggests 0.3 to 1.2.
	MaxTau = 2.0
	// MaxMatchPlayers bounds the players of one match given to
	// MatchResults (the work grows with the square of it).
	MaxMatchPlayers = 1024
)

// Defaults, from Glickman's paper.
const (
	DefaultRating     = 1500.0
	DefaultRD         = 350.0
	DefaultVolatility = 0.06
	DefaultTau        = 0.5
	// DefaultMaxRD caps RD. The Glicko-2 paper has no cap; Glicko (the
	// first system) caps RD at 350, the RD of an unrated player, so a player
	// who stays away long is treated as new, never as less known than new.
	DefaultMaxRD = 350.0
)

// glickoScale converts between the public scale and Glicko-2's internal one
// (173.7178 = 400/ln 10).
const glickoScale = 173.7178

// convergence is ε of step 5 of the paper.
const convergence = 0.000001

// minPositive keeps RD and volatility positive (valid) should they underflow
// after extreme games.
const minPositive = 1e-9

// maxIterations bounds the volatility search; it converges in well under 100
// iterations for every valid input, so reaching it is reported as an error.
const maxIterations = 1000

// ErrInvalid is wrapped by every input error of this package.
var ErrInvalid = errors.New("ratings: invalid input")

// Rating is a player's rating on the public scale.
type Rating struct {
	Rating     float64 // 1500 for a new player
	RD         float64 // rating deviation, > 0; 350 for a new player
	Volatility float64 // σ, > 0; 0.06 for a new player
}

// New returns the rating of a player who has never played: 1500, RD 350,
// volatility 0.06.
func New() Rating {
	return Rating{Rating: DefaultRating, RD: DefaultRD, Volatility: DefaultVolatility}
}

// Result is one game of a rating period, seen from the rated player.
type Result struct {
	Opponent Rating  // the opponent's rating before the period
	Score    float64 // 1 win, 0.5 draw, 0 loss; any value in [0, 1]
}

// System holds the Glicko-2 parameters. The zero value is ready to use and
// means Tau 0.5 and MaxRD 350.
type System struct {
	// Tau (τ) constrains how fast volatility changes; default 0.5.
	// Smaller values suit games where upsets are rare.
	Tau float64
	// MaxRD caps RD; default 350 (see DefaultMaxRD).
	MaxRD float64
}

func (s System) tau() float64 {
	if s.Tau == 0 {
		return DefaultTau
	}
	return s.Tau
}

func (s System) maxRD() float64 {
	if s.MaxRD == 0 {
		return DefaultMaxRD
	}
	return s.MaxRD
}

// Validate reports whether the parameters are usable.
func (s System) Validate() error {
	if math.IsNaN(s.Tau) || s.Tau < 0 || s.Tau > MaxTau {
		return fmt.Errorf("%w: Tau %v must be in (0, %v] (0 means %v)", ErrInvalid, s.Tau, MaxTau, DefaultTau)
	}
	if math.IsNaN(s.MaxRD) || s.MaxRD < 0 || s.MaxRD > MaxRating {
		return fmt.Errorf("%w: MaxRD %v must be in (0, %v] (0 means %v)", ErrInvalid, s.MaxRD, MaxRating, DefaultMaxRD)
	}
	return nil
}

// ValidateRating reports whether r is usable by s: a finite rating in [MinRating,
// MaxRating], an RD in (0, MaxRD] and a volatility in (0, MaxVolatility].
func (s System) ValidateRating(r Rating) error {
	if !(r.Rating >= MinRating && r.Rating <= MaxRating) { // also catches NaN
		return fmt.Errorf("%w: rating %v must be in [%d, %d]", ErrInvalid, r.Rating, MinRating, MaxRating)
	}
	if !(r.RD > 0 && r.RD <= s.maxRD()) {
		return fmt.Errorf("%w: rating deviation %v must be in (0, %v]", ErrInvalid, r.RD, s.maxRD())
	}
	if !(r.Volatility > 0 && r.Volatility <= MaxVolatility) {
		return fmt.Errorf("%w: volatility %v must be in (0, %v]", ErrInvalid, r.Volatility, MaxVolatility)
	}
	return nil
}

// Update returns p's rating after one rating period in which p played games.
// With no games, RD grows as in Idle and the rest is unchanged. Every
// opponent's rating is the one from before the period: rate all players of a
// period from the same snapshot.
func (s System) Update(p Rating, games []Result) (Rating, error) {
	if err := s.Validate(); err != nil {
		return Rating{}, err
	}
	if err := s.ValidateRating(p); err != nil {
		return Rating{}, fmt.Errorf("player: %w", err)
	}
	for i, g := range games {
		if err := s.ValidateRating(g.Opponent); err != nil {
			return Rating{}, fmt.Errorf("game %d opponent: %w", i, err)
		}
		if !(g.Score >= 0 && g.Score <= 1) {
			return Rating{}, fmt.Errorf("%w: game %d score %v must be in [0, 1]", ErrInvalid, i, g.Score)
		}
	}
	if len(games) == 0 {
		return s.idle(p, 1), nil
	}

	// Step 2: to the Glicko-2 scale.
	mu := (p.Rating - DefaultRating) / glickoScale
	phi := p.RD / glickoScale
	sigma := p.Volatility

	// Steps 3 and 4: the estimated variance v and improvement Δ.
	var vInv, sum float64
	for _, g := range games {
		muJ := (g.Opponent.Rating - DefaultRating) / glickoScale
		gJ := gPhi(g.Opponent.RD / glickoScale)
		e := expected(mu, muJ, gJ)
		vInv += gJ * gJ * e * (1 - e)
		sum += gJ * (g.Score - e)
	}
	if vInv == 0 || math.IsInf(1/vInv, 0) {
		// Only reachable when every expected score rounds to 0 or 1
		// (rating gaps of thousands of points): the games carry no
		// information, so treat the period as idle.
		return s.idle(p, 1), nil
	}
	v := 1 / vInv
	delta := v * sum

	// Step 5: the new volatility.
	sigmaNew, err := s.volatility(phi, sigma, v, delta)
	if err != nil {
		return Rating{}, err
	}

	// Steps 6 and 7: the new deviation and rating.
	phiStar := math.Sqrt(phi*phi + sigmaNew*sigmaNew)
	phiNew := 1 / math.Sqrt(1/(phiStar*phiStar)+1/v)
	// μ' = μ + φ'²·Σ, converted back as the change alone so that a win
	// can never lower the rating by rounding.

	// Step 8: back to the public scale.
	return s.clamp(Rating{
		Rating:     p.Rating + glickoScale*phiNew*phiNew*sum,
		RD:         glickoScale * phiNew,
		Volatility: sigmaNew,
	}), nil
}

// Idle returns p's rating after periods rating periods without games: RD
// grows to sqrt(RD² + periods·(173.7178·σ)²), capped at MaxRD; Rating and
// Volatility do not change. Idle(p, 1) equals Update(p, nil).
func (s System) Idle(p Rating, periods int) (Rating, error) {
	if err := s.Validate(); err != nil {
		return Rating{}, err
	}
	if err := s.ValidateRating(p); err != nil {
		return Rating{}, fmt.Errorf("player: %w", err)
	}
	if periods < 0 {
		return Rating{}, fmt.Errorf("%w: periods %d must not be negative", ErrInvalid, periods)
	}
	return s.idle(p, periods), nil
}

func (s System) idle(p Rating, periods int) Rating {
	phi := p.RD / glickoScale
	phi = math.Sqrt(phi*phi + float64(periods)*p.Volatility*p.Volatility)
	p.RD = phi * glickoScale
	return s.clamp(p)
}

func (s System) clamp(r Rating) Rating {
	r.Rating = min(max(r.Rating, MinRating), MaxRating)
	r.RD = min(max(r.RD, minPositive), s.maxRD())
	r.Volatility = min(max(r.Volatility, minPositive), MaxVolatility)
	return r
}

// volatility is step 5 of the paper: the Illinois algorithm for the root of f.
func (s System) volatility(phi, sigma, v, delta float64) (float64, error) {
	tau := s.tau()
	a := math.Log(sigma * sigma)
	phi2, delta2 := phi*phi, delta*delta
	f := func(x float64) float64 {
		ex := math.Exp(x)
		d := phi2 + v + ex
		return ex*(delta2-phi2-v-ex)/(2*d*d) - (x-a)/(tau*tau)
	}
	A := a
	var B float64
	if delta2 > phi2+v {
		B = math.Log(delta2 - phi2 - v)
	} else {
		k := 1.0
		for f(a-k*tau) < 0 {
			k++
			if k > maxIterations {
				return 0, fmt.Errorf("%w: volatility search found no bracket", ErrInvalid)
			}
		}
		B = a - k*tau
	}
	fA, fB := f(A), f(B)
	for i := 0; math.Abs(B-A) > convergence; i++ {
		if i == maxIterations {
			return 0, fmt.Errorf("%w: volatility search did not converge", ErrInvalid)
		}
		C := A + (A-B)*fA/(fB-fA)
		fC := f(C)
		if fC*fB <= 0 {
			A, fA = B, fB
		} else {
			fA /= 2
		}
		B, fB = C, fC
	}
	return math.Exp(A / 2), nil
}

func gPhi(phi float64) float64 {
	return 1 / math.Sqrt(1+3*phi*phi/(math.Pi*math.Pi))
}

func expected(mu, muJ, gJ float64) float64 {
	return 1 / (1 + math.Exp(-gJ*(mu-muJ)))
}

// Expected returns the probability Glicko-2 gives p of beating opp (a draw
// counting half), from p's rating and opp's rating and deviation. It does not
// validate; give it valid ratings.
func Expected(p, opp Rating) float64 {
	mu := (p.Rating - DefaultRating) / glickoScale
	muJ := (opp.Rating - DefaultRating) / glickoScale
	return expected(mu, muJ, gPhi(opp.RD/glickoScale))
}
