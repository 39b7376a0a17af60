package simnode

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The lease watchdog fences a node once renewals stop for 2/3 of the TTL, and
// never while they arrive. It runs in a synctest bubble: time is virtual, so
// the test waits out whole TTLs without sleeping.
func TestWatchdogFencesAtTwoThirdsOfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := &Node{ctx: ctx}
		ka := make(chan *clientv3.LeaseKeepAliveResponse)
		s := &session{ka: ka, start: time.Now(), ttl: 3 * time.Second, fenced: make(chan struct{})}
		why := make(chan string, 1)
		start := time.Now()
		go func() { why <- n.watchdog(s) }()
		// Renewals every TTL/3 for 10 s: no fence.
		for time.Since(start) < 10*time.Second {
			time.Sleep(time.Second)
			ka <- &clientv3.LeaseKeepAliveResponse{}
		}
		select {
		case r := <-why:
			t.Fatalf("fenced while renewals arrived: %s", r)
		default:
		}
		// Renewals stop: fenced after 2/3 TTL (checked every TTL/10).
		stopped := time.Now()
		r := <-why
		took := time.Since(stopped)
		if took < 2*time.Second || took > 2*time.Second+300*time.Millisecond {
			t.Fatalf("fenced %v after the last renewal (%s); want 2/3 of the 3 s TTL", took, r)
		}
	})
}

// A closed keep-alive channel (the etcd client gave up on the lease) fences at
// once; shutting the node down does not.
func TestWatchdogKeepAliveClosedAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n := &Node{ctx: ctx}
		ka := make(chan *clientv3.LeaseKeepAliveResponse)
		s := &session{ka: ka, start: time.Now(), ttl: 3 * time.Second, fenced: make(chan struct{})}
		why := make(chan string, 1)
		go func() { why <- n.watchdog(s) }()
		close(ka)
		if r := <-why; r != "lease keep-alive stopped" {
			t.Fatalf("closed keep-alive: %q", r)
		}
		s2 := &session{ka: make(chan *clientv3.LeaseKeepAliveResponse), start: time.Now(), ttl: 3 * time.Second, fenced: make(chan struct{})}
		go func() { why <- n.watchdog(s2) }()
		time.Sleep(time.Second)
		cancel()
		if r := <-why; r != "" {
			t.Fatalf("shutdown: %q, want no fence", r)
		}
	})
}
