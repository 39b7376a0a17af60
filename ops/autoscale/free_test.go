package autoscale

import (
	"maps"
	"testing"
)

func TestFreeSessions(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Load
		want  map[string]Free
	}{
		{"no nodes", nil, map[string]Free{}},
		{"one region", []Load{
			{Node: "a", Region: "eu", Capacity: 64, Games: 10},
			{Node: "b", Region: "eu", Capacity: 64, Games: 64},
		}, map[string]Free{"eu": {Sessions: 54, Nodes: 2}}},
		{"draining nodes add no sessions but count", []Load{
			{Node: "a", Region: "eu", Capacity: 64, Games: 0, Draining: true},
			{Node: "b", Region: "eu", Capacity: 64, Games: 4},
		}, map[string]Free{"eu": {Sessions: 60, Nodes: 2, Draining: 1}}},
		{"a node over capacity counts zero, not less", []Load{
			{Node: "a", Region: "eu", Capacity: 8, Games: 12},
			{Node: "b", Region: "eu", Capacity: 8, Games: 2},
		}, map[string]Free{"eu": {Sessions: 6, Nodes: 2}}},
		{"a node of capacity zero (bad record) counts zero", []Load{
			{Node: "a", Region: "eu", Capacity: -3},
		}, map[string]Free{"eu": {Nodes: 1}}},
		{"regions apart", []Load{
			{Node: "a", Region: "eu", Capacity: 10, Games: 1},
			{Node: "b", Region: "us", Capacity: 20, Games: 5},
			{Node: "c", Region: "us", Capacity: 20, Games: 0, Draining: true},
		}, map[string]Free{"eu": {Sessions: 9, Nodes: 1}, "us": {Sessions: 15, Nodes: 2, Draining: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FreeSessions(tt.nodes)
			if got == nil {
				t.Fatal("FreeSessions returned a nil map")
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("FreeSessions = %v, want %v", got, tt.want)
			}
		})
	}
}
