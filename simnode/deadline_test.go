package simnode

import (
	"testing"

	"ludus.dev/ludus/sdk/abi"
)

func TestDeadlineSeconds(t *testing.T) {
	for _, c := range []struct{ module, quota, want int64 }{
		{0, 0, 3600},      // default: one hour
		{900, 0, 900},     // the module's own
		{0, 600, 600},     // the tenant's quota lowers the default
		{900, 600, 600},   // and the module's
		{900, 7200, 900},  // but never raises it
		{0, 7200, 3600},   // nor the default
		{-5, 0, 3600},     // nonsense from an old build: the default
		{86400, 0, 86400}, // a day, declared
	} {
		if got := deadlineSeconds(c.module, c.quota); got != c.want {
			t.Errorf("deadlineSeconds(%d, %d) = %d, want %d", c.module, c.quota, got, c.want)
		}
	}
}

// TestDeadlineReached: a game ends at tick max_duration_s × tick_rate, not a
// tick before, with the message the status and archive carry, and counts in
// its tenant's games_timed_out; the tenant's quota, learned later, applies to
// a running game.
func TestDeadlineReached(t *testing.T) {
	n := &Node{sched: newScheduler(1)}
	d := n.newDeadline("demo", abi.Meta{TickRate: 30}, 30)
	if msg, over := d.reached(3600*30 - 1); over {
		t.Fatalf("over a tick early: %q", msg)
	}
	msg, over := d.reached(3600 * 30)
	if !over || msg != "ended: reached its 3600 s deadline" {
		t.Fatalf("at the default deadline: %q, %v", msg, over)
	}
	if !isDeadlineMessage(msg+" (build 0123456789ab)") || isDeadlineMessage("match ended after 9 ticks (build 0123456789ab)") {
		t.Fatal("isDeadlineMessage does not tell the deadline's message")
	}
	if got := n.sched.usage.tenant("demo").newTimeout.Load(); got != 1 {
		t.Fatalf("games timed out = %d, want 1", got)
	}

	d = n.newDeadline("demo", abi.Meta{MaxDurationS: 120}, 35)
	if _, over := d.reached(120*35 - 1); over {
		t.Fatal("module deadline: over a tick early")
	}
	if msg, over := d.reached(120 * 35); !over || msg != "ended: reached its 120 s deadline" {
		t.Fatalf("module deadline: %q, %v", msg, over)
	}
	// The tenant's quota arrives from the backend while the game runs.
	n.sched.usage.learnMaxDurations(map[string]bool{"demo": true}, map[string]int64{"demo": 60})
	if msg, over := d.reached(60 * 35); !over || msg != "ended: reached its 60 s deadline" {
		t.Fatalf("with a 60 s quota: %q, %v", msg, over)
	}
	other := n.newDeadline("other", abi.Meta{MaxDurationS: 120}, 35)
	if _, over := other.reached(60 * 35); over {
		t.Fatal("one tenant's quota ended another tenant's game")
	}
	if _, over := (deadline{}).reached(1 << 40); over {
		t.Fatal("the zero deadline ended a game")
	}
}
