package autoscale

import (
	"errors"
	"math"
	"testing"
)

// testPolicy: nodes of 64 sessions, keep 32..128 free, 1..10 nodes.
var testPolicy = Policy{SessionsPerNode: 64, ScaleUpBelow: 32, DrainAbove: 128, MinReplicas: 1, MaxReplicas: 10}

func TestPolicyReplicas(t *testing.T) {
	tests := []struct {
		name    string
		p       Policy
		current int32
		free    Free
		want    int32
	}{
		{"within the band: no change", testPolicy, 3, Free{Sessions: 100, Nodes: 3}, 3},
		{"at ScaleUpBelow: no change", testPolicy, 3, Free{Sessions: 32, Nodes: 3}, 3},
		{"at DrainAbove: no change", testPolicy, 3, Free{Sessions: 128, Nodes: 3}, 3},
		{"one short: one node", testPolicy, 3, Free{Sessions: 31, Nodes: 3}, 4},
		{"none free: one node reaches 32", testPolicy, 3, Free{Sessions: 0, Nodes: 3}, 4},
		{"needs two nodes", Policy{SessionsPerNode: 10, ScaleUpBelow: 25, DrainAbove: 100, MaxReplicas: 50}, 5, Free{Sessions: 5, Nodes: 5}, 7},
		{"needs three nodes", Policy{SessionsPerNode: 10, ScaleUpBelow: 25, DrainAbove: 100, MaxReplicas: 50}, 5, Free{Sessions: 4, Nodes: 5}, 8},
		{"capped at MaxReplicas", Policy{SessionsPerNode: 1, ScaleUpBelow: 100, DrainAbove: 200, MaxReplicas: 10}, 4, Free{Nodes: 4}, 10},
		{"one node too many: drain one", testPolicy, 4, Free{Sessions: 192, Nodes: 4}, 3},
		{"just over DrainAbove but less than a node: keep", testPolicy, 4, Free{Sessions: 191, Nodes: 4}, 4},
		{"drain several", testPolicy, 8, Free{Sessions: 128 + 3*64 + 10, Nodes: 8}, 5},
		{"never below MinReplicas", testPolicy, 2, Free{Sessions: 128 * 10, Nodes: 2}, 1},
		{"the last idle node stays: its room is not above DrainAbove", Policy{SessionsPerNode: 64, ScaleUpBelow: 0, DrainAbove: 64, MaxReplicas: 4}, 1, Free{Sessions: 64, Nodes: 1}, 1},
		{"idle nodes but one drain with no ScaleUpBelow", Policy{SessionsPerNode: 64, ScaleUpBelow: 0, DrainAbove: 64, MaxReplicas: 4}, 3, Free{Sessions: 192, Nodes: 3}, 1},
		{"ScaleUpBelow 0 never scales up from zero", Policy{SessionsPerNode: 64, ScaleUpBelow: 0, DrainAbove: 64, MaxReplicas: 4}, 0, Free{}, 0},
		{"below MinReplicas is raised even within the band", testPolicy, 0, Free{Sessions: 64}, 1},
		{"above MaxReplicas is lowered even when short", testPolicy, 12, Free{Sessions: 0, Nodes: 12}, 10},
		{"starting replicas bring their room: no second scale-up", testPolicy, 4, Free{Sessions: 0, Nodes: 3}, 4},
		{"starting replicas count, not more", testPolicy, 5, Free{Sessions: 0, Nodes: 3}, 5},
		{"new region, nothing registered, fleet at zero", testPolicy, 0, Free{}, 1},
		{"new region with a big ScaleUpBelow", Policy{SessionsPerNode: 64, ScaleUpBelow: 200, DrainAbove: 300, MaxReplicas: 10}, 0, Free{}, 4},
		{"draining nodes are registered, not starting", testPolicy, 4, Free{Sessions: 0, Nodes: 5, Draining: 2}, 5},
		{"no overflow at the int32 limit", Policy{SessionsPerNode: 1, ScaleUpBelow: math.MaxInt32 - 1, DrainAbove: math.MaxInt32, MaxReplicas: math.MaxInt32}, math.MaxInt32 - 1, Free{Nodes: math.MaxInt32}, math.MaxInt32},
		{"no overflow from a huge Source count", Policy{SessionsPerNode: math.MaxInt32, ScaleUpBelow: 0, DrainAbove: math.MaxInt32, MinReplicas: 2, MaxReplicas: math.MaxInt32}, math.MaxInt32, Free{Sessions: math.MaxInt}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("test policy invalid: %v", err)
			}
			if got := tt.p.Replicas(tt.current, tt.free); got != tt.want {
				t.Errorf("Replicas(%d, %+v) = %d, want %d", tt.current, tt.free, got, tt.want)
			}
		})
	}
}

// The policy settles: applied to its own answer (nodes registered, games
// unchanged) it changes nothing, even with DrainAbove = ScaleUpBelow.
func TestPolicySettles(t *testing.T) {
	for _, p := range []Policy{testPolicy, {SessionsPerNode: 7, ScaleUpBelow: 20, DrainAbove: 20, MaxReplicas: 1000}, {SessionsPerNode: 64, ScaleUpBelow: 32, DrainAbove: 33, MaxReplicas: 1000}} {
		for games := 0; games <= 500; games += 3 {
			for nodes := int32(0); nodes <= 40; nodes++ {
				if games > int(nodes)*p.SessionsPerNode {
					continue // no fleet runs more games than it has room for
				}
				free := Free{Sessions: int(nodes)*p.SessionsPerNode - games, Nodes: int(nodes)}
				want := p.Replicas(nodes, free)
				if want < nodes && int(want)*p.SessionsPerNode < games {
					continue // not enough room left for the games: a drain would not finish
				}
				after := Free{Sessions: max(int(want)*p.SessionsPerNode-games, 0), Nodes: int(want)}
				if again := p.Replicas(want, after); again != want && want > p.MinReplicas && want < p.MaxReplicas {
					t.Fatalf("%+v: %d games on %d nodes → %d nodes → %d nodes: the policy flaps", p, games, nodes, want, again)
				}
			}
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	bad := []struct {
		name string
		p    Policy
	}{
		{"zero value", Policy{}},
		{"no sessions per node", Policy{SessionsPerNode: 0, DrainAbove: 10, MaxReplicas: 1}},
		{"negative ScaleUpBelow", Policy{SessionsPerNode: 8, ScaleUpBelow: -1, DrainAbove: 10, MaxReplicas: 1}},
		{"DrainAbove below ScaleUpBelow", Policy{SessionsPerNode: 1, ScaleUpBelow: 32, DrainAbove: 16, MaxReplicas: 1}},
		{"negative MinReplicas", Policy{SessionsPerNode: 8, DrainAbove: 8, MinReplicas: -1, MaxReplicas: 1}},
		{"MaxReplicas zero", Policy{SessionsPerNode: 8, DrainAbove: 8}},
		{"Max below Min", Policy{SessionsPerNode: 8, DrainAbove: 8, MinReplicas: 3, MaxReplicas: 2}},
		{"overflowing band", Policy{SessionsPerNode: math.MaxInt, ScaleUpBelow: math.MaxInt, DrainAbove: math.MaxInt, MaxReplicas: 1}},
		{"DrainAbove beyond the limit", Policy{SessionsPerNode: 1, DrainAbove: math.MaxInt32 + 1, MaxReplicas: 1}},
		{"very negative DrainAbove", Policy{SessionsPerNode: 1, ScaleUpBelow: 5, DrainAbove: math.MinInt, MaxReplicas: 1}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", tt.p, err)
			}
		})
	}
	if err := (Policy{SessionsPerNode: 64, ScaleUpBelow: 32, DrainAbove: 32, MaxReplicas: 1}).Validate(); err != nil {
		t.Errorf("DrainAbove = ScaleUpBelow is valid: %v", err)
	}
	if err := testPolicy.Validate(); err != nil {
		t.Errorf("testPolicy: %v", err)
	}
}
