// Package matchmaking is the pure core of the matchmaker: it turns the tickets
// of one queue (one tenant and game mode) into matches. It does no I/O, reads
// no clock (the caller passes now) and keeps no state between calls, so the
// service around it scans a queue every few seconds by calling Form with the
// tickets still waiting, and tests and Simulate drive it with a fake clock.
//
// # Tickets and parties
//
// A Ticket is one party: one or more players who queue together and are
// always placed in the same team (parties are never split). A ticket's rating
// is the average of its members' ratings; the average keeps a team's rating
// sum, which is what teams are balanced on, true to its players. Each member
// reports a round-trip time per region.
//
// # The band
//
// The band is how far, in rating points either side, a ticket accepts
// opponents and teammates. It starts at Rules.BandStart and widens by
// BandStep every BandInterval the ticket waits, up to BandCap:
//
//	band(t) = min(BandStart + BandStep·floor(elapsed/BandInterval), BandCap)
//
// With DefaultRules (the field-tested values of an 8-player shooter) a new
// ticket accepts ±100, ±150 after 5 s, and ±550 after 45 s: waiting longer
// trades quality for time. Two tickets may meet only if each is within the
// other's band: |r1 − r2| ≤ min(band1, band2), so a new player is not thrown
// against a veteran because the veteran has waited long.
//
// # Regions
//
// Rules.MaxRTT lists the regions a queue may use, each with an RTT limit. A
// ticket can play in a region if every member has measured it and the
// party's worst RTT there is within the limit: the worst-connected member
// decides. A match is placed in a region every one of its tickets can play
// in; among those, the one with the lowest worst RTT over all its players.
// A ticket with no such region is rejected with ErrNoRegion.
//
// # Guarantees of Form
//
//   - No ticket is in two matches, and every ticket given is accounted for:
//     matched, timed out, still searching, or rejected with a reason.
//   - A match has Rules.Teams teams of exactly Rules.TeamSize seats; seats
//     are bots only in matches formed for timed-out tickets when
//     Rules.BotsFillAtTimeout is set.
//   - Every two tickets of a match are within each other's bands, so a
//     match's rating spread is at most the band of its oldest ticket.
//   - Teams are split to minimise the difference between the highest and
//     lowest team rating sum: exactly for matches of up to 8 players (and two
//     teams of up to 8), and otherwise by a bounded exact search improved by
//     swapping equal-sized parties.
//   - Oldest first: the oldest unmatched ticket anchors the next match, which
//     is filled with the oldest tickets that fit (within the bands, sharing
//     a region, parties fitting into teams). A ticket that cannot be matched
//     now does not hold up younger ones: if taking every ticket that fits
//     leaves the match short, the anchor tries again, passing over a party
//     that would leave seats no party size further on in its window can
//     fill (a party of 3 for teams of 4 when no solo player is in reach).
//     An anchor whose party size the queue's sizes cannot complete at all
//     is not tried.
//   - A ticket that has waited Rules.MaxWait without a match times out, or
//     with BotsFillAtTimeout is matched with other timed-out tickets it can
//     meet and bots in the empty seats. A ticket that can still make a full
//     match in the same scan gets it instead.
//   - Deterministic: the same now, tickets and rules give the same Result.
//     Ties are broken by ticket id, so with distinct ids the order of the
//     tickets changes nothing but the Rejection indexes.
//
// # Why oldest first rather than nearest rating
//
// Filling the anchor's match with the tickets nearest its rating gives
// tighter matches; filling it with the oldest tickets in its band is fairer
// (the ones left waiting at the end of a scan are the newest). Measured with
// Simulate (4v4, two regions, 200 tickets/s): oldest first had a p99 time to
// match of 4.0 s against 4.8 s, but a median rating spread of 83 against 21
// and a p99 team imbalance of 351 against 242 rating points. The band is the
// quality a studio asks for, so Form spends it on fairness.
//
// Form runs in O(n log n) for n tickets plus the sweep around each anchor
// (an anchor that cannot be matched may look at every ticket in its band,
// up to three times); BenchmarkForm3000 measures it, and
// BenchmarkFormNoSolos3000 a queue that has run out of solo players.
// Simulate runs a queue with Poisson arrivals against Form and reports
// times to match and match quality, for capacity planning and for
// "ludus bench matchmaking".
package matchmaking
