package clusterstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader is returned by a write fenced on a Leadership that was lost:
// its leader key is gone (resigned, or its lease expired) or belongs to a
// newer term.
var ErrNotLeader = errors.New("clusterstate: not the leader any more")

// Lease is one process's lease for elections and for keys that must vanish
// when the process does (the matchmaker's tickets): etcd's
// concurrency.Session, kept alive by the client until Close or until the
// client is closed. Done is closed when the keep-alive ends.
//
// It is etcd's session rather than the sim nodes' Session on purpose: that
// one fences itself early (2/3 TTL without a renewal) because a sim node
// writes a game's log on the strength of its lease alone. A leader here
// never does: every write it makes as leader is one transaction that also
// compares its leader key's create revision (Leadership), so a leader whose
// lease expired cannot commit, however late it notices.
type Lease struct {
	s *concurrency.Session
}

// GrantLease grants a lease of ttl (whole seconds, at least one) and keeps it
// alive until life ends, Close, or the client is closed; life also bounds the
// grant.
func (c *Client) GrantLease(life context.Context, ttl time.Duration) (*Lease, error) {
	secs := max(int(ttl/time.Second), 1)
	s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(secs), concurrency.WithContext(life))
	if err != nil {
		return nil, fmt.Errorf("clusterstate: grant lease: %w", err)
	}
	return &Lease{s: s}, nil
}

// ID is the lease's id.
func (l *Lease) ID() int64 { return int64(l.s.Lease()) }

// Done is closed when the lease is no longer kept alive (Close, the client
// closed, or etcd unreachable until the lease expired).
func (l *Lease) Done() <-chan struct{} { return l.s.Done() }

// Close revokes the lease: every key bound to it, leader keys included,
// vanishes at once.
func (l *Lease) Close() error { return l.s.Close() }

// Leadership is a won election: the leader key (bound to the campaigner's
// Lease) and its create revision, the fencing token of the term.
type Leadership struct {
	e    *concurrency.Election
	cli  *clientv3.Client
	key  string
	rev  int64
	done chan struct{}
	stop context.CancelFunc
	once sync.Once
}

// ElectionPrefix is the key prefix of an election named name (a path of ids,
// e.g. "mm/acme/ranked"). The candidates' keys are under it.
func ElectionPrefix(name string) string { return Prefix + "elections/" + name + "/" }

// Campaign blocks until the caller, holding lease, leads the election named
// name, or ctx ends (then the candidacy is withdrawn). value is published in
// the leader key (e.g. the replica's id).
func (c *Client) Campaign(ctx context.Context, lease *Lease, name, value string) (*Leadership, error) {
	e := concurrency.NewElection(lease.s, ElectionPrefix(name))
	if err := e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(c.cli.Ctx())
	l := &Leadership{e: e, cli: c.cli, key: e.Key(), rev: e.Rev(), done: make(chan struct{}), stop: stop}
	go l.watch(wctx, lease)
	return l, nil
}

// watch closes done when the leader key is deleted, the lease is lost or
// the client closes.
func (l *Leadership) watch(ctx context.Context, lease *Lease) {
	defer l.lost()
	// The key may be gone already (between Campaign and here): check once.
	resp, err := l.cli.Get(ctx, l.key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
		return
	}
	wch := l.cli.Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				// The watch broke (no etcd leader, compaction): we cannot
				// know we still lead. Writes are fenced anyway; step down.
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return
				}
			}
		}
	}
}

func (l *Leadership) lost() { l.once.Do(func() { close(l.done) }) }

// Done is closed when the leadership is lost or resigned. Writes are fenced
// on the leader key regardless, so a late Done costs retries, not safety.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Key and Rev are the leader key and its create revision (the fencing token).
func (l *Leadership) Key() string { return l.key }
func (l *Leadership) Rev() int64  { return l.rev }

// fence is the comparison every write made as leader carries.
func (l *Leadership) fence() *pb.Compare {
	return cmpCreated(l.key, l.rev)
}

// Resign gives the leadership up (deleting the leader key, so another
// candidate wins at once) and closes Done.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.e.Resign(ctx)
	l.stop()
	l.lost()
	return err
}

// Leader returns the value published by the election's current leader, or
// false when nobody leads.
func (c *Client) Leader(ctx context.Context, name string) (string, bool, error) {
	resp, err := c.cli.Get(ctx, ElectionPrefix(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}
