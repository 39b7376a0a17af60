package clusterstate

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is one lease of a sim node: granted, kept alive by the etcd client
// (a renewal every TTL/3), and watched. Owner keys and the node's record are
// bound to it. When renewals stop arriving for 2/3 of the TTL — before the
// lease can have expired — or the keep-alive ends, the session fences itself:
// Done is closed and every game claimed under it must stop writing, because a
// lease alone is not mutual exclusion (Jepsen, etcd 3.4.3). Appends are fenced
// on the owner key anyway (Append); fencing the session stops the simulation.
//
// It differs from etcd's concurrency.Session on purpose: that one's Done fires
// only once the client gives up on the lease, which during a partition is
// after the lease expired and another node may own the game
// (docs/RATIONALE.md, "Why a hand-rolled lease session").
type Session struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	ttl   time.Duration

	done   chan struct{} // closed when the session is fenced
	once   sync.Once
	mu     sync.Mutex
	reason string
}

func newSession(cli *clientv3.Client, lease clientv3.LeaseID, ttl time.Duration) *Session {
	return &Session{cli: cli, lease: lease, ttl: ttl, done: make(chan struct{})}
}

// NewSession grants a lease of ttl (whole seconds, at least one), bounded by
// ctx, and keeps it alive until life ends. The watchdog runs until life ends
// or the session is fenced; when life ends the session is not fenced (the
// node is shutting down), and Close revokes the lease.
func (c *Client) NewSession(ctx, life context.Context, ttl time.Duration) (*Session, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	grant, err := c.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("clusterstate: grant lease: %w", err)
	}
	s := newSession(c.cli, grant.ID, time.Duration(secs)*time.Second)
	start := time.Now()
	ka, err := c.cli.KeepAlive(life, grant.ID)
	if err != nil {
		return nil, fmt.Errorf("clusterstate: keep lease alive: %w", err)
	}
	go func() {
		if reason := s.watchdog(life, ka, start); reason != "" {
			s.Fence(reason)
		}
	}()
	return s, nil
}

// watchdog returns why the session must stop trusting its lease, or "" when
// life ends or the session was fenced by other means.
func (s *Session) watchdog(life context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse, start time.Time) string {
	// Renewals are sent every TTL/3; allow one to go missing, fence at 2/3 TTL.
	limit := s.ttl * 2 / 3
	last := start
	t := time.NewTicker(s.ttl / 10)
	defer t.Stop()
	for {
		select {
		case <-life.Done():
			return ""
		case <-s.done:
			return ""
		case resp, ok := <-ka:
			if !ok || resp == nil {
				if life.Err() != nil {
					return ""
				}
				return "lease keep-alive stopped"
			}
			last = time.Now()
		case now := <-t.C:
			if now.Sub(last) > limit {
				return fmt.Sprintf("no lease renewal for %v", now.Sub(last).Round(time.Millisecond))
			}
		}
	}
}

// Lease is the session's lease id (published in NodeInfo.Lease).
func (s *Session) Lease() int64 { return int64(s.lease) }

// TTL is the lease's time to live as granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is fenced.
func (s *Session) Done() <-chan struct{} { return s.done }

// Fenced reports whether the session is fenced.
func (s *Session) Fenced() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Fence stops trusting the session now, as the watchdog does; it reports
// whether this call fenced it. The lease itself is left alone: the etcd
// client goes on renewing it (keeping its claims for Reclaim) until its
// owner revokes it (Close; a sim node does a while after registering again)
// or its life ends.
func (s *Session) Fence(reason string) bool {
	fenced := false
	s.once.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		close(s.done)
		fenced = true
	})
	return fenced
}

// Err is nil while the session is trusted, then ErrSessionFenced with the
// reason.
func (s *Session) Err() error {
	if !s.Fenced() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("%w: %s", ErrSessionFenced, s.reason)
}

// Holds reports whether an owner key is bound to this session's lease.
func (s *Session) Holds(o Owner) bool { return o.Lease == int64(s.lease) }

// Close revokes the lease: the node's record and every owner key bound to it
// vanish at once.
func (s *Session) Close(ctx context.Context) error {
	_, err := s.cli.Revoke(ctx, s.lease)
	return err
}

// PublishNode writes the node's record bound to the session's lease, with
// info.Lease set to it.
func (c *Client) PublishNode(ctx context.Context, s *Session, info NodeInfo) error {
	info.Lease = s.Lease()
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = c.cli.Put(ctx, NodeKey(info.ID), string(b), clientv3.WithLease(s.lease))
	return err
}
