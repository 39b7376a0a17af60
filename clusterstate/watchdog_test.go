package clusterstate

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The lease watchdog fences a session once renewals stop for 2/3 of the TTL,
// and never while they arrive. It runs in a synctest bubble: time is virtual,
// so the test waits out whole TTLs without sleeping.
func TestWatchdogFencesAtTwoThirdsOfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ka := make(chan *clientv3.LeaseKeepAliveResponse)
		s := newSession(nil, 1, 3*time.Second)
		why := make(chan string, 1)
		start := time.Now()
		go func() { why <- s.watchdog(ctx, ka, start) }()
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
// once; the end of the session's life (the node shutting down) does not, nor
// does a watchdog whose session was fenced by other means keep running.
func TestWatchdogKeepAliveClosedAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ka := make(chan *clientv3.LeaseKeepAliveResponse)
		s := newSession(nil, 1, 3*time.Second)
		why := make(chan string, 1)
		go func() { why <- s.watchdog(ctx, ka, time.Now()) }()
		close(ka)
		if r := <-why; r != "lease keep-alive stopped" {
			t.Fatalf("closed keep-alive: %q", r)
		}
		s2 := newSession(nil, 2, 3*time.Second)
		go func() { why <- s2.watchdog(ctx, make(chan *clientv3.LeaseKeepAliveResponse), time.Now()) }()
		time.Sleep(time.Second)
		cancel()
		if r := <-why; r != "" {
			t.Fatalf("shutdown: %q, want no fence", r)
		}
		s3 := newSession(nil, 3, 3*time.Second)
		go func() {
			why <- s3.watchdog(context.Background(), make(chan *clientv3.LeaseKeepAliveResponse), time.Now())
		}()
		time.Sleep(time.Second)
		s3.Fence("test")
		if r := <-why; r != "" {
			t.Fatalf("fenced session: %q, want the watchdog to stop quietly", r)
		}
	})
}
