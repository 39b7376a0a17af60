package matchmaking

import (
	"errors"
	"fmt"
	"time"
)

// Errors. Each is wrapped with the details (which member, which value, what
// to do), so the message can be shown to the player or studio as it is; test
// for them with errors.Is.
var (
	ErrInvalidRules    = errors.New("matchmaking: invalid rules")
	ErrBadTicket       = errors.New("matchmaking: malformed ticket")
	ErrWrongQueue      = errors.New("matchmaking: ticket is for another queue")
	ErrEmptyParty      = errors.New("matchmaking: the party has no members")
	ErrPartyTooLarge   = errors.New("matchmaking: the party is larger than a team")
	ErrDuplicateMember = errors.New("matchmaking: a player is in the party twice")
	ErrBadRating       = errors.New("matchmaking: rating out of range")
	ErrBadRTT          = errors.New("matchmaking: round-trip time out of range")
	ErrNoRegion        = errors.New("matchmaking: no region is close enough to the whole party")
	ErrDuplicateTicket = errors.New("matchmaking: a ticket with this id is already queued")
	ErrAlreadyQueued   = errors.New("matchmaking: a player is already queued in another ticket")
)

// Ticket is a request to play: one party, queued together, matched together.
type Ticket struct {
	ID         string
	Tenant     string
	Mode       string
	Party      []Member
	EnqueuedAt time.Time // when the party joined the queue; sets its band
}

// Member is one player of a party.
type Member struct {
	AccountID string
	Rating    float64 // in [MinRating, MaxRating]
	// RTT is the player's measured round-trip time to each region, in ms.
	// A region without a measurement is one the player cannot play in;
	// regions the queue does not use are ignored.
	RTT map[string]float64
}

// Rating returns the ticket's rating: the average of its members' ratings.
// The average keeps a party's team strength (the sum) right when it is
// balanced against other teams; a party mixing a strong and a weak player is
// matched by its middle. It returns 0 for an empty party.
func (t Ticket) Rating() float64 {
	if len(t.Party) == 0 {
		return 0
	}
	var sum float64
	for _, m := range t.Party {
		sum += m.Rating
	}
	return sum / float64(len(t.Party))
}

// Validate checks the ticket alone against the queue's rules: its ids, its
// party (not empty, no larger than a team, no player twice), every rating and
// RTT, and that at least one of the rules' regions is within MaxRTT for every
// member. Form also rejects tickets whose id or players are already queued.
// Errors wrap one of the package's sentinel errors.
// The rules are validated first.
func (t Ticket) Validate(r Rules) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := t.validateFields(r); err != nil {
		return err
	}
	regions := sortedRegions(r)
	if _, mask := worstRTTs(t, regions, r, nil); mask == 0 {
		return errNoRegion(t, regions)
	}
	return nil
}

func errNoRegion(t Ticket, regions []string) error {
	return fmt.Errorf("%w: ticket %q: no region of %v is within its RTT limit for every member; play with players nearer to each other or nearer to a region",
		ErrNoRegion, t.ID, regions)
}

// validateFields is Validate without the region check, for valid rules.
func (t Ticket) validateFields(r Rules) error {
	if t.ID == "" || len(t.ID) > MaxIDLen {
		return fmt.Errorf("%w: ticket id must be 1 to %d bytes", ErrBadTicket, MaxIDLen)
	}
	if t.EnqueuedAt.IsZero() {
		return fmt.Errorf("%w: ticket %q has no EnqueuedAt time", ErrBadTicket, t.ID)
	}
	if t.Tenant != r.Tenant || t.Mode != r.Mode {
		return fmt.Errorf("%w: ticket %q is for tenant %q mode %q, this queue is tenant %q mode %q",
			ErrWrongQueue, t.ID, t.Tenant, t.Mode, r.Tenant, r.Mode)
	}
	if len(t.Party) == 0 {
		return fmt.Errorf("%w: ticket %q; queue with at least one player", ErrEmptyParty, t.ID)
	}
	if len(t.Party) > r.TeamSize {
		return fmt.Errorf("%w: %d players, but teams in mode %q have %d seats; split the party or pick a mode with larger teams",
			ErrPartyTooLarge, len(t.Party), r.Mode, r.TeamSize)
	}
	for i, m := range t.Party {
		if m.AccountID == "" || len(m.AccountID) > MaxIDLen {
			return fmt.Errorf("%w: member %d of ticket %q needs an account id of 1 to %d bytes", ErrBadTicket, i, t.ID, MaxIDLen)
		}
		for _, o := range t.Party[:i] {
			if o.AccountID == m.AccountID {
				return fmt.Errorf("%w: account %q; each player may be in the party once", ErrDuplicateMember, m.AccountID)
			}
		}
		if !finiteIn(m.Rating, MinRating, MaxRating) {
			return fmt.Errorf("%w: account %q has rating %v; ratings must be in [%d, %d]",
				ErrBadRating, m.AccountID, m.Rating, MinRating, MaxRating)
		}
		if len(m.RTT) > MaxRegions {
			return fmt.Errorf("%w: account %q reports %d regions, at most %d are accepted", ErrBadRTT, m.AccountID, len(m.RTT), MaxRegions)
		}
		for region, ms := range m.RTT {
			if !finiteIn(ms, 0, MaxRTTms) {
				return fmt.Errorf("%w: account %q reports %v ms to %q; round-trip times must be in [0, %d] ms, measure again",
					ErrBadRTT, m.AccountID, ms, region, MaxRTTms)
			}
		}
	}
	return nil
}

// worstRTTs appends, for each of regions, the highest RTT of t's members
// there (+Inf where one has no measurement) to dst, and returns it with the
// mask of the regions where that worst RTT is within r.MaxRTT.
func worstRTTs(t Ticket, regions []string, r Rules, dst []float64) ([]float64, uint64) {
	var mask uint64
	for i, region := range regions {
		worst := 0.0
		for _, m := range t.Party {
			ms, ok := m.RTT[region]
			if !ok {
				worst = inf
				break
			}
			worst = max(worst, ms)
		}
		dst = append(dst, worst)
		if worst <= r.MaxRTT[region] {
			mask |= 1 << i
		}
	}
	return dst, mask
}
