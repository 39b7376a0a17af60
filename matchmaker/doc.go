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
//     it at once; a replica that dies takes its tickets with it within the
//     lease TTL (5 s by default).
//   - An account's search key (one search per account and tenant, any mode)
//     makes a second FindMatch of the same player fail with AlreadyExists.
//   - A party's members each hold a slot key; when every slot is taken, one
//     member's replica queues the party's ticket (the others' attempts lose a
//     compare). Any member's stream ending cancels the party for everyone.
//
// # One leader per queue
//
// Each replica campaigns (clusterstate.Campaign, etcd's concurrency.Election)
// for every queue that has rules. The leader reads the queue every Interval,
// calls matchmaking.Form on the tickets not already being allocated, hands
// each match to the Allocator, and then settles it: one transaction, fenced
// on the leader key's create revision, that compares every ticket's mod
// revision and every party member's slot, deletes them and puts a result per
// player for the replica holding the player's stream (which watches its own
// results prefix). A ticket that left or changed, or a leader that lost its
// term, fails the whole settlement: nothing is matched twice, and since the
// tickets stay in etcd until settled, nothing is lost when a leader dies —
// the next leader (within the lease TTL) forms them again. A failed
// allocation leaves the tickets searching. The price of allocating before
// settling: a match whose ticket leaves during allocation, or whose leader
// dies between allocation and settlement, wastes the allocated game.
//
// # Why allocate before settling
//
// Settling first (tickets to "allocating") would need a recovery path for
// matches whose leader died mid-allocation; allocating first needs none:
// until the settlement commits, the tickets are ordinary queued tickets.
package matchmaker
