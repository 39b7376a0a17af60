package ratings

import (
	"fmt"
	"math"
	"slices"
)

// Team is one side of a finished match: its players' ratings before the match
// and where it placed.
type Team struct {
	Players []Rating
	// Place is the team's finishing position: lower is better, equal places
	// are a draw between those teams. Any integers work (1, 2, 3 or the
	// output of Places).
	Place int
}

// MatchResults turns a match between teams into one-on-one results: every
// player is rated as having played every player of every other team, scoring
// 1 against a team placed behind, 0.5 against a team placed equal and 0
// against a team placed ahead. Teammates do not play each other.
// results[t][p] are the results of teams[t].Players[p]; all opponents carry
// their ratings from before the match.
//
// This is the "individual update" method of G. J. Williams, "Abstracting
// Glicko-2 for Team Games" (MSc thesis, University of Cincinnati, 2013), also
// the common way to use Glicko or Elo for free-for-all placements (n players
// are n(n-1)/2 pairwise games). Its known cost: in a 4-versus-4 a player gets
// 4 results per match, so ratings move faster than in a 1-versus-1; a
// player's own teammates' strength is ignored, so carried players gain as
// much as their carriers. Give the results to Update as one rating period, or
// add them to the period's other games.
func (s System) MatchResults(teams []Team) ([][][]Result, error) {
	if err := s.validateTeams(teams); err != nil {
		return nil, err
	}
	out := make([][][]Result, len(teams))
	for t, team := range teams {
		n := 0
		for u, other := range teams {
			if u != t {
				n += len(other.Players)
			}
		}
		out[t] = make([][]Result, len(team.Players))
		for p := range team.Players {
			games := make([]Result, 0, n)
			for u, other := range teams {
				if u == t {
					continue
				}
				score := 0.5
				switch {
				case team.Place < other.Place:
					score = 1
				case team.Place > other.Place:
					score = 0
				}
				for _, opp := range other.Players {
					games = append(games, Result{Opponent: opp, Score: score})
				}
			}
			out[t][p] = games
		}
	}
	return out, nil
}

// UpdateMatch rates one match as one rating period for each of its players
// (see MatchResults for the method) and returns the new ratings, shaped like
// teams: out[t][p] is the new rating of teams[t].Players[p].
func (s System) UpdateMatch(teams []Team) ([][]Rating, error) {
	results, err := s.MatchResults(teams)
	if err != nil {
		return nil, err
	}
	out := make([][]Rating, len(teams))
	for t, team := range teams {
		out[t] = make([]Rating, len(team.Players))
		for p, r := range team.Players {
			nr, err := s.Update(r, results[t][p])
			if err != nil {
				return nil, fmt.Errorf("team %d player %d: %w", t, p, err)
			}
			out[t][p] = nr
		}
	}
	return out, nil
}

func (s System) validateTeams(teams []Team) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if len(teams) < 2 {
		return fmt.Errorf("%w: a match needs at least 2 teams, got %d", ErrInvalid, len(teams))
	}
	total := 0
	for t, team := range teams {
		if len(team.Players) == 0 {
			return fmt.Errorf("%w: team %d has no players", ErrInvalid, t)
		}
		total += len(team.Players)
		if total > MaxMatchPlayers {
			return fmt.Errorf("%w: more than %d players in one match", ErrInvalid, MaxMatchPlayers)
		}
		for p, r := range team.Players {
			if err := s.ValidateRating(r); err != nil {
				return fmt.Errorf("team %d player %d: %w", t, p, err)
			}
		}
	}
	return nil
}

// Places turns per-team scores (higher is better) into places for Team.Place:
// 1 for the best, equal scores share a place and the next place skips
// ("1, 2, 2, 4"). Scores must be finite.
func Places(scores []float64) ([]int, error) {
	for i, s := range scores {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("%w: score %d is %v; scores must be finite", ErrInvalid, i, s)
		}
	}
	sorted := slices.Clone(scores)
	slices.Sort(sorted)
	places := make([]int, len(scores))
	for i, s := range scores {
		// 1 + how many scores are strictly higher.
		higher := len(sorted) - upperBound(sorted, s)
		places[i] = 1 + higher
	}
	return places, nil
}

// upperBound returns the index of the first element of sorted greater than x.
func upperBound(sorted []float64, x float64) int {
	i, _ := slices.BinarySearchFunc(sorted, x, func(e, t float64) int {
		if e <= t {
			return -1
		}
		return 1
	})
	return i
}
