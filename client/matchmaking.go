package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// DefaultRegion is the region MeasureRTT reports the gateway's round trip
// under unless WithRegion names another: the region of `ludus dev`'s nodes.
const DefaultRegion = "local"

// MaxRTTSamples is the most pings MeasureRTT sends in one call.
const MaxRTTSamples = 100

// maxRTTMillis is the highest round trip FindMatch accepts (docs/API.md,
// "Matchmaking"); slower measurements are reported as this.
const maxRTTMillis = 10000

// MeasureRTT pings the gateway n times (1 to MaxRTTSamples, one after
// another) and returns the median round trip in whole milliseconds, keyed by
// the gateway's region, for FindMatchOptions.RTT: the one WithRegion gave,
// else the one the gateway's Ping names, else DefaultRegion ("local"). Round trips over 10 s count as 10 s, the most
// FindMatch accepts. Any failed ping fails the measurement.
func (c *Client) MeasureRTT(ctx context.Context, n int) (map[string]int32, error) {
	if n < 1 || n > MaxRTTSamples {
		return nil, fmt.Errorf("client: measure RTT: %d pings asked for; send 1 to %d", n, MaxRTTSamples)
	}
	samples := make([]time.Duration, 0, n)
	for i := range n {
		d, err := c.Ping(ctx)
		if err != nil {
			return nil, fmt.Errorf("measure RTT: ping %d of %d: %w", i+1, n, err)
		}
		samples = append(samples, d)
	}
	slices.Sort(samples)
	ms := min(samples[len(samples)/2].Round(time.Millisecond).Milliseconds(), maxRTTMillis)
	return map[string]int32{c.region(): int32(ms)}, nil
}

func (c *Client) region() string {
	if c.cfg.region != "" {
		return c.cfg.region
	}
	if r := c.pingRegion.Load(); r != nil {
		return *r
	}
	return DefaultRegion
}

// Party is a party code reserved with CreateParty.
type Party struct {
	// Code is what every member (the creator too) passes to FindMatch as
	// FindMatchOptions.PartyCode.
	Code string
	Mode string
	// Size is the number of players in the party, the creator included: every
	// member's FindMatchOptions.PartySize.
	Size int
	// Expires is when the code lapses if unused (15 minutes after creation).
	Expires time.Time
}

// CreateParty reserves a party code for size players (2 or more, at most the
// mode's team size) of mode. Share Code with the members; each of them, and
// the creator, then calls FindMatch with it. Errors keep the gateway's
// Connect code: NotFound when the mode has no matchmaking rules,
// InvalidArgument for a size the mode cannot take.
func (c *Client) CreateParty(ctx context.Context, mode string, size int) (Party, error) {
	resp, err := c.match.CreateParty(ctx, connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: mode, Size: int32(size)}))
	if err != nil {
		return Party{}, fmt.Errorf("create a party of %d for mode %q: %w", size, mode, err)
	}
	return Party{Code: resp.Msg.Code, Mode: mode, Size: size, Expires: time.UnixMilli(resp.Msg.ExpiresAtUnixMs)}, nil
}

// FindMatchOptions describe a search.
type FindMatchOptions struct {
	// Mode is the game mode's id in the tenant's matchmaking rules, e.g.
	// "arena".
	Mode string
	// PartyCode, from CreateParty, to search as a party; empty to search
	// alone.
	PartyCode string
	// PartySize is the party's size as created, or 0 (or 1) alone.
	PartySize int
	// RTT is the round trip in ms to each region's gateway the player may
	// play in; a region left out is one they cannot. Nil: FindMatch measures
	// it with MeasureRTT(ctx, 3).
	RTT map[string]int32
}

// Update is one message of a search: Searching, or its outcome, exactly one
// of Found, TimedOut and Cancelled.
type Update interface {
	fmt.Stringer
	isUpdate()
}

// Searching: the player is still queued (or, in a party, waiting for the
// other members to search).
type Searching struct {
	// Band is the rating points either side of the player's (party's) rating
	// within which others are accepted now; it widens as the wait grows.
	Band float64
	// Elapsed is the time since the ticket entered the queue (0 while a party
	// waits for its members).
	Elapsed time.Duration
	// QueueSize is about how many tickets (parties count once) wait in the
	// mode's queue.
	QueueSize int
	// PartyJoined, in a party, is how many members are searching so far, of
	// PartySize (as given to FindMatch; 1 alone).
	PartyJoined int
	PartySize   int
}

// Found is the game the player was placed in: Play (or Join) GameID.
type Found struct {
	GameID string
	// Region the game runs in.
	Region string
	// Gateway is the URL of a gateway in that region to join the game
	// through; empty means the gateway this Client talks to.
	Gateway string
	// Team (0-based) and Slot are hints for a lobby: the player's team and
	// seat in the match (team × team size + position in the team). Slot is
	// not necessarily the slot JoinGame (or Play) gives the player.
	Team int
	Slot int
	// Teammates are the account ids of the player's team, the player
	// included; bots are not listed.
	Teammates []string
}

// TimedOut: the mode's maximum wait passed without a match. Search again or
// pick another mode.
type TimedOut struct{ Reason string }

// Cancelled: the search ended without a match, e.g. "a party member left".
type Cancelled struct{ Reason string }

func (Searching) isUpdate() {}
func (Found) isUpdate()     {}
func (TimedOut) isUpdate()  {}
func (Cancelled) isUpdate() {}

func (u Searching) String() string {
	s := fmt.Sprintf("searching: band ±%.0f, %v elapsed, %d in the queue", u.Band, u.Elapsed.Round(100*time.Millisecond), u.QueueSize)
	if u.PartySize > 1 {
		s += fmt.Sprintf(", %d of %d of the party searching", u.PartyJoined, u.PartySize)
	}
	return s
}

func (u Found) String() string {
	return fmt.Sprintf("found: game %s in region %s, team %d, slot %d", u.GameID, u.Region, u.Team, u.Slot)
}

func (u TimedOut) String() string  { return "timed out: " + u.Reason }
func (u Cancelled) String() string { return "cancelled: " + u.Reason }

// update converts a stream message of a search by a party of partySize; nil
// for an empty (or unknown) one.
func update(m *ludusv1.FindMatchResponse, partySize int) Update {
	switch v := m.Msg.(type) {
	case *ludusv1.FindMatchResponse_Searching:
		s := v.Searching
		return Searching{Band: s.Band, Elapsed: time.Duration(s.ElapsedMs) * time.Millisecond,
			QueueSize: int(s.QueueSize), PartyJoined: int(s.PartyJoined), PartySize: partySize}
	case *ludusv1.FindMatchResponse_Found:
		f := v.Found
		return Found{GameID: f.GameId, Region: f.Region, Gateway: f.Gateway, Team: int(f.Team), Slot: int(f.Slot),
			Teammates: slices.Clone(f.Teammates)}
	case *ludusv1.FindMatchResponse_TimedOut:
		return TimedOut{Reason: v.TimedOut.Reason}
	case *ludusv1.FindMatchResponse_Cancelled:
		return Cancelled{Reason: v.Cancelled.Reason}
	}
	return nil
}

func final(u Update) bool {
	_, searching := u.(Searching)
	return !searching
}

// errSearchCancelled is the cause of a search ended by Cancel.
var errSearchCancelled = errors.New("client: the search was cancelled")

// errNoOutcome: the stream ended cleanly without found, timed_out or
// cancelled (a gateway going away); searching again is the remedy.
var errNoOutcome = connect.NewError(connect.CodeUnavailable,
	errors.New("the matchmaking stream ended without an outcome; search again"))

// searchBuffer is how many updates wait for a slow reader; beyond it the
// oldest searching updates are dropped (the outcome, always the last, never
// is).
const searchBuffer = 8

// Search is one FindMatch stream in progress. Its methods are safe for
// concurrent use.
type Search struct {
	updates chan Update
	cancel  context.CancelCauseFunc
	done    chan struct{}
	err     error // set before done closes
}

// FindMatch queues the player (alone, or as a member of a party) in a mode
// and returns once the gateway has taken the search, that is, with its first
// update queued on Updates. The search lasts until its outcome, Cancel, or the
// end of ctx; leaving the queue is at once in each case.
//
// Errors keep the gateway's Connect code (docs/API.md, "Matchmaking"):
// NotFound (no rules for the mode, or an unknown or expired party code),
// InvalidArgument (RTT out of range or in no region of the mode, a party size
// the mode or the code does not allow), AlreadyExists (this account searches
// already), FailedPrecondition (the party is full) and Unavailable (search
// again, after a pause). Without a sign-in the error is ErrNotSignedIn.
func (c *Client) FindMatch(ctx context.Context, opts FindMatchOptions) (*Search, error) {
	if _, err := c.Ticket(ctx); err != nil {
		return nil, fmt.Errorf("find a match in mode %q: %w", opts.Mode, err)
	}
	rtt := opts.RTT
	if rtt == nil {
		var err error
		if rtt, err = c.MeasureRTT(ctx, 3); err != nil {
			return nil, fmt.Errorf("find a match in mode %q: %w", opts.Mode, err)
		}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	st, err := c.match.FindMatch(sctx, connect.NewRequest(&ludusv1.FindMatchRequest{
		Mode: opts.Mode, PartyCode: opts.PartyCode, PartySize: int32(opts.PartySize), RttMs: rtt}))
	if err == nil && !st.Receive() {
		err = st.Err()
		if err == nil {
			err = errNoOutcome
		}
		_ = st.Close()
	}
	if err != nil {
		cancel(nil)
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("find a match in mode %q: %w", opts.Mode, err)
	}
	s := &Search{updates: make(chan Update, searchBuffer), cancel: cancel, done: make(chan struct{})}
	go s.run(sctx, opts.Mode, max(opts.PartySize, 1), st)
	return s, nil
}

// run delivers the stream's updates, the first one received already.
func (s *Search) run(ctx context.Context, mode string, partySize int, st *connect.ServerStreamForClient[ludusv1.FindMatchResponse]) {
	var err error // nil after an outcome
	defer func() {
		_ = st.Close()
		if cause := context.Cause(ctx); err != nil && ctx.Err() != nil {
			err = cause // Cancel or the caller's context, whatever the stream said
			if errors.Is(err, errSearchCancelled) {
				err = nil
			}
		} else if err != nil {
			err = fmt.Errorf("find a match in mode %q: %w", mode, err)
		}
		s.cancel(nil)
		s.err = err
		// done first: a reader who sees Updates closed can read Err at once.
		close(s.done)
		close(s.updates)
	}()
	for {
		if u := update(st.Msg(), partySize); u != nil {
			offer(s.updates, u)
			if final(u) {
				return
			}
		}
		if !st.Receive() {
			if err = st.Err(); err == nil {
				err = errNoOutcome
			}
			return
		}
	}
}

// Updates delivers the search's updates in order: Searching about once a
// second, then exactly one of Found, TimedOut and Cancelled, then it is
// closed. It is also closed, without an outcome, after Cancel, when the
// FindMatch context ends, or when the stream breaks; Err says which. A reader
// that falls behind loses the oldest Searching updates, never the outcome.
func (s *Search) Updates() <-chan Update { return s.updates }

// Done is closed when the search has ended (Err is then final); Updates is
// closed right after it.
func (s *Search) Done() <-chan struct{} { return s.done }

// Err is why the search ended without an outcome: nil after an outcome or
// Cancel (and while the search runs), the FindMatch context's error, or the
// stream's error with its Connect code (Unavailable for a stream that ended
// without an outcome: search again).
func (s *Search) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Cancel leaves the queue: it closes the stream (in a party, the other
// members' searches end with Cancelled) and returns once the search has
// ended. Cancelling an ended search does nothing.
func (s *Search) Cancel() {
	s.cancel(errSearchCancelled)
	<-s.done
}
