package clusterstate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func grantLease(t *testing.T) *Lease {
	t.Helper()
	l, err := state.GrantLease(testCtx(t), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// One leader at a time; a leader whose lease ends loses its term, the next
// candidate wins, and the old term's fenced writes fail.
func TestElectionFailoverFencesTheOldLeader(t *testing.T) {
	ctx := testCtx(t)
	name := fmt.Sprintf("test/%d", time.Now().UnixNano())
	a, b := grantLease(t), grantLease(t)
	la, err := state.Campaign(ctx, a, name, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *Leadership, 1)
	go func() {
		lb, err := state.Campaign(ctx, b, name, "b")
		if err != nil {
			t.Error(err)
		}
		won <- lb
	}()
	select {
	case <-won:
		t.Fatal("b won while a leads")
	case <-time.After(300 * time.Millisecond):
	}
	if v, ok, err := state.Leader(ctx, name); err != nil || !ok || v != "a" {
		t.Fatalf("leader %q %v %v, want a", v, ok, err)
	}
	if _, err := state.Settle(ctx, la, Settlement{}); err != nil {
		t.Fatalf("a fenced write while leading: %v", err)
	}
	a.Close() // a's process dies: its lease is revoked
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a's leadership not Done after its lease ended")
	}
	var lb *Leadership
	select {
	case lb = <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("b did not win")
	}
	if _, err := state.Settle(ctx, la, Settlement{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a's write after losing: %v, want ErrNotLeader", err)
	}
	if _, err := state.Settle(ctx, lb, Settlement{}); err != nil {
		t.Fatalf("b's write: %v", err)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := state.Leader(ctx, name); ok {
		t.Fatal("a leader after b resigned")
	}
}

// A candidate that gives up (ctx ends) withdraws: it never leads later.
func TestElectionCancelledCampaignWithdraws(t *testing.T) {
	ctx := testCtx(t)
	name := fmt.Sprintf("test/%d", time.Now().UnixNano())
	a, b := grantLease(t), grantLease(t)
	la, err := state.Campaign(ctx, a, name, "a")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := contextWithTimeout(200 * time.Millisecond)
	defer cancel()
	if _, err := state.Campaign(short, b, name, "b"); err == nil {
		t.Fatal("b won while a leads")
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := state.Leader(ctx, name); err != nil || ok {
		t.Fatalf("leader %q after a resigned and b withdrew", v)
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
