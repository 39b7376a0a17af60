package matchmaking

import (
	"fmt"
	"slices"
	"time"
)

// Limits on rules and tickets. Anything beyond them is a mistake or an attack,
// not a game.
const (
	MinRating = 0     // lowest rating a member may have
	MaxRating = 10000 // highest rating a member may have
	MaxRTTms  = 10000 // highest round-trip time a member may report, in ms
	MaxSeats  = 128   // most seats (Teams × TeamSize) in one match
	// MaxRegions bounds the regions of one queue (Rules.MaxRTT) and the
	// RTT measurements of one member.
	MaxRegions = 64
	// MaxIDLen bounds ticket ids, account ids, tenants, modes and regions,
	// in bytes.
	MaxIDLen = 256
)

// Rules configure the queue of one tenant and game mode. Every field must be
// set (DefaultRules fills them with the field-tested values); Validate says
// what is wrong.
type Rules struct {
	Tenant string
	Mode   string

	// TeamSize is the number of players per team and Teams the number of
	// teams: a match has Teams × TeamSize seats (at most MaxSeats). A
	// free-for-all is TeamSize 1; a co-operative mode is Teams 1.
	TeamSize int
	Teams    int

	// The band is how far apart in rating (points, not a percentage) two
	// tickets may be. A ticket waiting for elapsed accepts
	//
	//	min(BandStart + BandStep·floor(elapsed / BandInterval), BandCap)
	//
	// on either side of its own rating (see Band).
	BandStart    float64       // e.g. 100 (±100)
	BandStep     float64       // e.g. 50; 0 keeps the band at BandStart
	BandInterval time.Duration // e.g. 5 s
	BandCap      float64       // e.g. 550: the width reached after 45 s

	// MaxWait is how long a ticket may wait: a ticket still unmatched after
	// waiting MaxWait times out, or, with BotsFillAtTimeout, gets a match
	// whose empty seats are bots.
	MaxWait           time.Duration // e.g. 45 s
	BotsFillAtTimeout bool

	// MaxRTT lists the regions matches may be placed in, each with the
	// highest round-trip time (ms) the worst-connected member of any ticket
	// may have there. Regions not listed are never chosen.
	MaxRTT map[string]float64
}

// DefaultRules returns the rules of the field report's 4-versus-4 shooter: a
// ±100 band widening by 50 every 5 s to its cap of ±550 at 45 s, where tickets
// time out. maxRTT lists the regions and their RTT limits (there is no
// sensible default: it depends on the game's tick rate).
func DefaultRules(tenant, mode string, maxRTT map[string]float64) Rules {
	return Rules{
		Tenant:       tenant,
		Mode:         mode,
		TeamSize:     4,
		Teams:        2,
		BandStart:    100,
		BandStep:     50,
		BandInterval: 5 * time.Second,
		BandCap:      550,
		MaxWait:      45 * time.Second,
		MaxRTT:       maxRTT,
	}
}

// Seats returns the players a full match has: Teams × TeamSize.
func (r Rules) Seats() int { return r.Teams * r.TeamSize }

// Band returns the band (± rating points) of a ticket that has waited
// elapsed: min(BandStart + BandStep·floor(elapsed/BandInterval), BandCap). A
// negative elapsed counts as 0. Call it only on valid rules.
func (r Rules) Band(elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return min(r.BandStart, r.BandCap)
	}
	steps := float64(elapsed / r.BandInterval)
	return min(r.BandStart+r.BandStep*steps, r.BandCap)
}

func finiteIn(v, lo, hi float64) bool { return v >= lo && v <= hi } // false for NaN

// Validate reports the first problem with the rules, wrapping
// ErrInvalidRules, or nil.
func (r Rules) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRules}, args...)...)
	}
	switch {
	case r.Tenant == "" || len(r.Tenant) > MaxIDLen:
		return bad("Tenant must be 1 to %d bytes", MaxIDLen)
	case r.Mode == "" || len(r.Mode) > MaxIDLen:
		return bad("Mode must be 1 to %d bytes", MaxIDLen)
	case r.TeamSize < 1:
		return bad("TeamSize is %d; a team needs at least 1 player", r.TeamSize)
	case r.Teams < 1:
		return bad("Teams is %d; a match needs at least 1 team", r.Teams)
	case r.TeamSize > MaxSeats || r.Teams > MaxSeats || r.Seats() > MaxSeats:
		return bad("%d teams of %d is more than %d seats", r.Teams, r.TeamSize, MaxSeats)
	case r.Seats() < 2:
		return bad("1 team of 1 is not a match; set Teams or TeamSize to at least 2")
	case !finiteIn(r.BandStart, 0, MaxRating):
		return bad("BandStart %v must be in [0, %d] rating points", r.BandStart, MaxRating)
	case !finiteIn(r.BandStep, 0, MaxRating):
		return bad("BandStep %v must be in [0, %d] rating points", r.BandStep, MaxRating)
	case !finiteIn(r.BandCap, r.BandStart, MaxRating):
		return bad("BandCap %v must be in [BandStart (%v), %d]", r.BandCap, r.BandStart, MaxRating)
	case r.BandInterval <= 0:
		return bad("BandInterval %v must be positive", r.BandInterval)
	case r.MaxWait <= 0:
		return bad("MaxWait %v must be positive", r.MaxWait)
	case len(r.MaxRTT) == 0:
		return bad("MaxRTT lists no region; list the regions matches may be placed in with their RTT limits (ms)")
	case len(r.MaxRTT) > MaxRegions:
		return bad("MaxRTT lists %d regions, more than %d", len(r.MaxRTT), MaxRegions)
	}
	for region, ms := range r.MaxRTT {
		if region == "" || len(region) > MaxIDLen {
			return bad("region names in MaxRTT must be 1 to %d bytes", MaxIDLen)
		}
		if !finiteIn(ms, 0, MaxRTTms) || ms == 0 {
			return bad("MaxRTT[%q] = %v ms must be in (0, %d]", region, ms, MaxRTTms)
		}
	}
	return nil
}

// sortedRegions returns the rules' regions in name order; region i of a queue
// is bit i of a region mask.
func sortedRegions(r Rules) []string {
	regions := make([]string, 0, len(r.MaxRTT))
	for region := range r.MaxRTT {
		regions = append(regions, region)
	}
	slices.Sort(regions)
	return regions
}
