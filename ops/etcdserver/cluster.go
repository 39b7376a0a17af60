package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// StartCluster starts n members of one etcd cluster in this process, on
// loopback ports of their own, with their data under dir, and waits until
// every member serves. cfg is each member's Config but for Dir, the ports,
// Name and InitialCluster. Tests use it to take etcd's leader down under a
// running workload; `ludus dev` runs one member.
func StartCluster(ctx context.Context, dir string, n int, cfg Config) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdserver: a cluster of %d members", n)
	}
	cfgs := make([]Config, n)
	peers := make([]string, n)
	for i := range cfgs {
		c := cfg
		c.Dir = filepath.Join(dir, fmt.Sprintf("m%d", i))
		c.Name = fmt.Sprintf("m%d", i)
		var err error
		if c.ClientPort, err = port(0); err != nil {
			return nil, err
		}
		if c.PeerPort, err = port(0); err != nil {
			return nil, err
		}
		cfgs[i] = c
		peers[i] = fmt.Sprintf("%s=http://127.0.0.1:%d", c.Name, c.PeerPort)
	}
	servers := make([]*Server, 0, n)
	closeAll := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for _, c := range cfgs {
		c.InitialCluster = strings.Join(peers, ",")
		s, err := Start(ctx, c)
		if err != nil {
			closeAll()
			return nil, err
		}
		servers = append(servers, s)
	}
	for _, s := range servers {
		select {
		case <-s.e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			closeAll()
			return nil, errors.New("etcdserver: cluster not ready after 30 s")
		case <-ctx.Done():
			closeAll()
			return nil, ctx.Err()
		}
	}
	return servers, nil
}

// Leader reports whether this member is its cluster's raft leader now.
func (s *Server) Leader() bool {
	return s.e.Server.Leader() == s.e.Server.MemberID()
}

// Kill stops the member as a crash would: at once, without handing its
// leadership to another member first (Close hands it over), then closes its
// listeners. Close after Kill does nothing.
func (s *Server) Kill() {
	s.stop.Do(func() {
		s.e.Server.HardStop()
		s.e.Close()
	})
}

// Restart starts a stopped member again, on its data, ports and cluster,
// and returns it. A member of a cluster is not waited for: it serves once
// a quorum is up.
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	return Start(ctx, s.cfg)
}
