package backend

import (
	"errors"
	"testing"
)

// TestSweepInBatches: a sweep deletes batch after batch while each is full,
// and stops at the first short batch or error, with the count so far.
func TestSweepInBatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batches []int
		fail    bool // the call after the batches fails
		want    int
		calls   int
	}{
		{"nothing", []int{0}, false, 0, 1},
		{"short", []int{7}, false, 7, 1},
		{"backlog", []int{sweepBatch, sweepBatch, 3}, false, 2*sweepBatch + 3, 3},
		{"exactly full", []int{sweepBatch, 0}, false, sweepBatch, 2},
		{"error", []int{sweepBatch}, true, sweepBatch, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			got, err := inBatches(func() (int, error) {
				calls++
				if calls > len(tc.batches) {
					if tc.fail {
						return 0, errors.New("store down")
					}
					t.Fatal("called after a short batch")
				}
				return tc.batches[calls-1], nil
			})
			if got != tc.want || calls != tc.calls || (err != nil) != tc.fail {
				t.Fatalf("inBatches = %d, %v after %d calls; want %d after %d calls", got, err, calls, tc.want, tc.calls)
			}
		})
	}
}
