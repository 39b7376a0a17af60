package localcluster

import (
	"fmt"
	"time"

	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/inputlog"
)

// AckRecord is one input a client was told is resolved: answered OK by
// SendInput, or acknowledged on a Play stream.
type AckRecord struct {
	// Seq is the input's own sequence number (the request's).
	Seq uint64
	// AckedSeq is the reply's acked_seq; the protocol says it equals Seq.
	AckedSeq uint64
	// SupersededBy is the reply's superseded_by_seq: non-zero when the input
	// was not applied because this later input of the player is durable.
	SupersededBy uint64
	// CoveredBy is set for a Play input that got no ack of its own but was
	// resolved by the (cumulative) ack of a later input: the seq that ack
	// claims durable (its superseded_by_seq, else its acked_seq).
	CoveredBy uint64
}

// claimedDurable is the seq the reply says is in the log (0: none of its own).
func (a AckRecord) claimedDurable() uint64 {
	switch {
	case a.CoveredBy != 0:
		return 0
	case a.SupersededBy != 0:
		return a.SupersededBy
	}
	return a.AckedSeq
}

// LogIndex is what a game's input log applied, per account: how many times
// each input sequence number was applied.
type LogIndex struct {
	applied map[string]map[uint64]int
	// Unjoined counts inputs of a slot whose join is not in the log (their
	// account is unknown; they are indexed under "slot:N").
	Unjoined int
}

// IndexLog reads a game's chunks in order, mapping each input to the account
// that joined its slot (join entries carry the account; a leave frees the
// slot).
func IndexLog(chunks []*inputlog.Chunk) *LogIndex {
	l := &LogIndex{applied: map[string]map[uint64]int{}}
	slots := map[uint8]string{}
	for _, ch := range chunks {
		for _, e := range ch.Entries {
			switch e.Event.Kind {
			case abi.EventJoin:
				slots[e.Event.Slot] = e.Account
			case abi.EventLeave:
				delete(slots, e.Event.Slot)
			case abi.EventInput:
				acct, ok := slots[e.Event.Slot]
				if !ok {
					acct = fmt.Sprintf("slot:%d", e.Event.Slot)
					l.Unjoined++
				}
				m := l.applied[acct]
				if m == nil {
					m = map[uint64]int{}
					l.applied[acct] = m
				}
				m[e.Seq]++
			}
		}
	}
	return l
}

// Applied is how many times the account's input seq is in the log.
func (l *LogIndex) Applied(account string, seq uint64) int { return l.applied[account][seq] }

// Inputs is how many distinct inputs of the account the log holds.
func (l *LogIndex) Inputs(account string) int { return len(l.applied[account]) }

// AppliedTwice counts (account, seq) pairs applied more than once.
func (l *LogIndex) AppliedTwice() int {
	n := 0
	for _, m := range l.applied {
		for _, c := range m {
			if c > 1 {
				n++
			}
		}
	}
	return n
}

// AckCheck is how one player's acknowledged inputs compare with the log.
type AckCheck struct {
	// Acked: inputs answered OK (by their own reply or a cumulative ack).
	Acked int
	// Superseded: of those, answered as superseded by a later input.
	Superseded int
	// Cumulative: Play inputs resolved only by a later input's ack.
	Cumulative int
	// SeqMismatch: replies whose acked_seq is not the input's own seq.
	SeqMismatch int
	// Lost: distinct seqs a reply claimed durable (acked_seq, or
	// superseded_by_seq) that the log does not hold.
	Lost int
	// NotInLog: inputs answered OK whose own seq is neither in the log nor
	// superseded by a later seq that is in the log.
	NotInLog int
}

// Add sums two checks.
func (c AckCheck) Add(o AckCheck) AckCheck {
	return AckCheck{c.Acked + o.Acked, c.Superseded + o.Superseded, c.Cumulative + o.Cumulative,
		c.SeqMismatch + o.SeqMismatch, c.Lost + o.Lost, c.NotInLog + o.NotInLog}
}

// CheckAcks compares the inputs one account was told are resolved (one record
// per input) with the game's log.
func CheckAcks(l *LogIndex, account string, acks []AckRecord) AckCheck {
	var c AckCheck
	claimed := map[uint64]bool{}
	for _, a := range acks {
		c.Acked++
		if a.CoveredBy != 0 {
			c.Cumulative++
		} else if a.AckedSeq != a.Seq {
			c.SeqMismatch++
		}
		if a.SupersededBy != 0 {
			c.Superseded++
		}
		if d := a.claimedDurable(); d != 0 {
			claimed[d] = true
		}
		if !l.resolved(account, a) {
			c.NotInLog++
		}
	}
	for seq := range claimed {
		if l.Applied(account, seq) == 0 {
			c.Lost++
		}
	}
	return c
}

// resolved: the input is in the log, or a later input that replaced it is.
func (l *LogIndex) resolved(account string, a AckRecord) bool {
	if l.Applied(account, a.Seq) > 0 {
		return true
	}
	if a.CoveredBy == 0 {
		return a.SupersededBy > a.Seq && l.Applied(account, a.SupersededBy) > 0
	}
	// A cumulative ack says every input up to CoveredBy is resolved: a state
	// input may have been replaced by any later one up to it.
	for seq, n := range l.applied[account] {
		if n > 0 && seq > a.Seq && seq <= a.CoveredBy {
			return true
		}
	}
	return false
}

// TickTracker follows the frame ticks one player's stream delivers (across
// re-attaches and re-opened streams): a frame whose tick is below the highest
// tick already shown is a rollback of the difference.
type TickTracker struct {
	seen      bool
	high      int64
	last      int64
	maxRB     int64
	rollbacks int
}

// Observe records a frame's tick and returns the rollback it shows (0: none).
func (t *TickTracker) Observe(tick int64) int64 {
	defer func() { t.last = tick }()
	if !t.seen {
		t.seen, t.high = true, tick
		return 0
	}
	if tick >= t.high {
		t.high = tick
		return 0
	}
	rb := t.high - tick
	if tick < t.last { // a new jump back, not the climb after one
		t.rollbacks++
	}
	t.maxRB = max(t.maxRB, rb)
	return rb
}

// MaxRollback is the largest rollback seen, in ticks.
func (t *TickTracker) MaxRollback() int64 { return t.maxRB }

// Rollbacks is how many times the stream jumped back.
func (t *TickTracker) Rollbacks() int { return t.rollbacks }

// TicksToMs converts ticks at tickRate ticks/s to milliseconds.
func TicksToMs(ticks int64, tickRate int32) float64 {
	if tickRate <= 0 {
		return 0
	}
	return float64(ticks) * 1000 / float64(tickRate)
}

// Percentile of sorted values (nearest rank); 0 for none.
func Percentile(sorted []float64, q float64) float64 { return percentile(sorted, q) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
