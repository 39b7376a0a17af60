package simnode

import (
	"fmt"
	"strings"

	"ludus.dev/ludus/sdk/abi"
)

// Hard deadline per game (issue 14): a game runs at most its module's
// max_duration_s (abi.Meta.MaxDurationS; abi.DefaultMaxDurationS, one hour,
// when the module declares none), lowered by its tenant's
// max_game_duration_s quota when that is smaller. The deadline is in game
// time — tick max_duration_s × tick_rate — so every node that ever runs the
// game ends it at the same tick (a failover does not restart the clock, and
// a replay of the log reproduces the end). At it the game ends ("ended"),
// its final result is reported and its status and archive say "ended:
// reached its 3600 s deadline".
//
// The tenant's quota is learned from the backend's answers to the node's usage
// reports (usage.go), so a quota set while a game runs applies within a flush
// interval; a node that has not heard of it yet uses the module's deadline.

// deadlineSeconds is the effective deadline in seconds: the module's (or the
// default), lowered by the tenant's quota if that is set and smaller.
func deadlineSeconds(moduleS, quotaS int64) int64 {
	s := moduleS
	if s <= 0 {
		s = abi.DefaultMaxDurationS
	}
	if quotaS > 0 && quotaS < s {
		s = quotaS
	}
	return s
}

// deadlineMessage is the final status message of a game ended at its deadline.
func deadlineMessage(seconds int64) string {
	return fmt.Sprintf("ended: reached its %d s deadline", seconds)
}

// isDeadlineMessage reports whether a final message (perhaps with " (build
// …)" after it) is deadlineMessage's: game.finish keeps it instead of "match
// ended after N ticks", so status and archive say why the game ended.
func isDeadlineMessage(s string) bool { return strings.HasPrefix(s, "ended: reached its ") }

// deadline is one game's hard deadline. The zero value never ends a game.
type deadline struct {
	usage    *usageMeter
	tenant   string
	moduleS  int64
	tickRate int64
}

// newDeadline returns the deadline of a game of tenant running a module with
// meta at tickRate ticks a second.
func (n *Node) newDeadline(tenant string, meta abi.Meta, tickRate int) deadline {
	return deadline{usage: n.sched.usage, tenant: tenant, moduleS: int64(meta.MaxDurationS), tickRate: int64(tickRate)}
}

// reached reports whether a game at tick (ticks stepped since it began) has
// reached its deadline, and then the game's final message; it counts the game
// in its tenant's games_timed_out. Call it once per tick, after stepping, and
// end the game the first time it answers true.
func (d deadline) reached(tick int64) (string, bool) {
	if d.usage == nil || d.tickRate <= 0 {
		return "", false
	}
	s := deadlineSeconds(d.moduleS, d.usage.tenantMaxDuration(d.tenant))
	if tick < s*d.tickRate {
		return "", false
	}
	d.usage.tenant(d.tenant).addTimedOut()
	return deadlineMessage(s), true
}
