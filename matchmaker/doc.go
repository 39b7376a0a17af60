// Package matchmaker is the matchmaking service: players queue with FindMatch
// (alone or as a party), a leader per queue forms matches with the pure
// package matchmaking, an injected Allocator places each match on a sim node,
// and every player's stream is told where to play.
//
// # Stateless replicas, state in etcd
//
// Any number of replicas run side by side, each with its own etcd client and
// one lease (clusterstate.Lease) it keeps alive. Every piece of queue state
// lives in etcd (clusterstate/tickets.go has the key layout):
//
//   - A ticket (one player, or one full party) is a key bound to the lease of
//     the replica holding the stream that queued it. The stream's end deletes
//     it at once (or, while etcd cannot take the deletion, as soon as it
//     can: the replica's lease outlives the search); a replica that dies
//     takes its tickets with it within the lease TTL (5 s by default).
//   - An account's search key (one search per account and tenant, any mode)
//     makes a second FindMatch of the same player fail with AlreadyExists.
//   - A party's members each hold a slot key, taken in one transaction that
//     also checks the party's mode and size; the member who takes the last
//     free slot queues the party's ticket. Every member follows the party's
//     slots (through one watch per replica, clusterstate.FollowParty); any
//     member's stream ending cancels the party for everyone.
//
// # One leader per queue
//
// Each replica watches every queue's rules (so a search reads them from
// memory) and campaigns (clusterstate.Campaign, etcd's concurrency.Election)
// for every queue that has rules. The leader follows the queue's tickets
// through a watch (clusterstate.WatchQueue: each ticket decoded once, not
// on every pass), calls matchmaking.Form every Interval on the tickets not
// already being allocated, hands each match to the Allocator, and then
// settles it: one transaction, fenced on the leader key's create revision,
// that compares every ticket's mod revision and every party member's slot,
// deletes them and puts the players' results, one key per replica holding
// some of their streams (each replica watches its own results prefix). The
// leader also publishes the queue's size, at most once a second, for the
// searching updates of the other replicas' streams (clusterstate.QueueSize):
// etcd counting a queue's keys visits every ticket key since its last
// compaction, deleted ones too. A
// ticket that left or changed, or a leader that lost its term, fails the
// whole settlement: nothing is matched twice, and since the tickets stay in
// etcd until settled, nothing is lost when a leader dies — the next leader
// (within the lease TTL) forms them again. A failed allocation leaves the
// tickets searching. The price of allocating before settling: a match whose
// ticket leaves during allocation, or whose leader dies between allocation
// and settlement, wastes the allocated game.
//
// # Group commit, and a bound on waiting
//
// A replica's writes to etcd (tickets queued, slots taken, matches settled,
// searches ended) are committed in groups: one etcd transaction holds each
// write's own transaction nested, with its own compares and its own
// outcome, so a busy replica makes a few large requests rather than many
// small ones (clusterstate's "Group commit"). Settlements go first, since
// they empty the queue; and when writes have waited longer than two seconds
// a new search is refused at once with ErrOverloaded (Unavailable: search
// again) rather than queued behind them, so an overload slows nobody down
// for long and settles itself.
//
// # Why allocate before settling
//
// Settling first (tickets to "allocating") would need a recovery path for
// matches whose leader died mid-allocation; allocating first needs none:
// until the settlement commits, the tickets are ordinary queued tickets.
package matchmaker
