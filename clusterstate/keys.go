// Package clusterstate owns Ludus's state in etcd: the key layout, the records
// stored there, the claim protocol sim nodes use to own games (a lease
// Session, Claim, fenced Append with Handoff, Release, Fail) and the read side
// (View, the watch-fed Directory). It is the only package of ours, besides
// ops/etcdserver (which runs embedded etcd) and cmd/, that imports the etcd
// client; everything else speaks to etcd through it (see
// internal/deps for the test that keeps it so).
//
// Key layout (every key is under Prefix; tenant ids namespace game keys):
//
//	/ludus/nodes/{node}                  NodeInfo JSON, bound to the node's lease
//	/ludus/drain/{node}                  set by an operator: the node drains and exits
//	/ludus/games/{tenant}/{game}         GameSpec JSON (immutable)
//	/ludus/owners/{tenant}/{game}        owner value "{node}/{claim id}", bound to the
//	                                     owner's lease; the key's create revision is
//	                                     the fencing token (Claim.Fence)
//	/ludus/status/{tenant}/{game}        GameStatus JSON, written with each log append
//	/ludus/logs/{tenant}/{game}/{seq}    input log chunks (package simnode/inputlog),
//	                                     seq as 16 hex digits so keys sort in order
//	/ludus/checkpoints/{tenant}/{game}   the newest checkpoint (simnode), written in
//	                                     the same fenced transaction as a chunk
//
// Matchmaking (tickets.go, election.go; package matchmaker):
//
//	/ludus/mm/rules/{tenant}/{mode}                 rules (protojson MatchmakingRules)
//	/ludus/mm/tickets/{tenant}/{mode}/{ticket}      QueuedTicket JSON, bound to the lease
//	                                                of the replica holding the stream
//	/ludus/mm/accounts/{tenant}/{account}           one search per account and tenant
//	/ludus/mm/parties/{tenant}/{code}               Party JSON, its own 15-minute lease
//	/ludus/mm/party-accounts/{tenant}/{code}/{account}
//	                                                a PartyMember, member's replica lease; the party
//	                                                is its first Size members by create revision
//	/ludus/mm/results/{replica}/{tenant}/{account}  a found match for that replica's stream
//	/ludus/elections/mm/{tenant}/{mode}/{lease}     leader election per queue
//
// Batch runs (batch.go; package batch):
//
//	/ludus/batchruns/{tenant}/{run}                run record: spec, state, deadline, budget
//	/ludus/batch/{tenant}/{run}/items/{n}          one per game not yet acknowledged
//	/ludus/batch/{tenant}/{run}/leases/{n}         a worker's claim, bound to its lease
//	/ludus/batch/{tenant}/{run}/progress           counters, updated with each ack
//	/ludus/batchledger/{tenant}                    settled CPU of the tenant's runs
//	/ludus/elections/batch-reaper/                 reaper election
//
// A finished game's keys are removed once its log is archived in the backend
// (RemoveGame): etcd holds coordination and live logs, not history.
package clusterstate

import (
	"fmt"
	"strconv"
	"strings"
)

// Prefix is the root of every Ludus key in etcd.
const Prefix = "/ludus/"

// Key builders. Tenant, game and node ids must be ValidID: they are path
// segments.
func NodesPrefix() string                 { return Prefix + "nodes/" }
func NodeKey(node string) string          { return NodesPrefix() + node }
func DrainKey(node string) string         { return Prefix + "drain/" + node }
func GamesPrefix(tenant string) string    { return Prefix + "games/" + tenant + "/" }
func GameKey(tenant, game string) string  { return GamesPrefix(tenant) + game }
func OwnersPrefix() string                { return Prefix + "owners/" }
func OwnerKey(tenant, game string) string { return OwnersPrefix() + tenant + "/" + game }
func StatusPrefix(tenant string) string   { return Prefix + "status/" + tenant + "/" }
func StatusKey(tenant, game string) string {
	return StatusPrefix(tenant) + game
}
func LogPrefix(tenant, game string) string { return Prefix + "logs/" + tenant + "/" + game + "/" }
func LogKey(tenant, game string, seq uint64) string {
	return fmt.Sprintf("%s%016x", LogPrefix(tenant, game), seq)
}
func CheckpointKey(tenant, game string) string {
	return Prefix + "checkpoints/" + tenant + "/" + game
}

// allStatusPrefix is every tenant's status keys (the sim nodes' sweep).
func allStatusPrefix() string { return Prefix + "status/" }

// OwnerValue is the value of an owner key: the node id and a claim id unique to
// this claim, so that an append compares not just "which node" but "which claim"
// (a game handed from A to B and back to A is a new claim).
func OwnerValue(node, claim string) string { return node + "/" + claim }

// ParseOwner splits an owner key's value into node id and claim id.
func ParseOwner(v string) (node, claim string) {
	node, claim, _ = strings.Cut(v, "/")
	return node, claim
}

// splitGameKey splits the "{tenant}/{game}" after prefix in k.
func splitGameKey(k, prefix string) (tenant, game string, ok bool) {
	rest, ok := strings.CutPrefix(k, prefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// logSeq returns the sequence number at the end of a log key.
func logSeq(k string) (uint64, error) {
	v, err := strconv.ParseUint(k[strings.LastIndexByte(k, '/')+1:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("clusterstate: log key %s: %w", k, err)
	}
	return v, nil
}

func lastSegment(k string) string { return k[strings.LastIndexByte(k, '/')+1:] }

// ValidID reports whether s can be a tenant, game or node id, that is a path
// segment of a key: ids are generated by Ludus, so anything else (slashes,
// empty, huge) is simply not found.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
