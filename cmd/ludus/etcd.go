package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"ludus.dev/ludus/ops/etcdserver"
)

// runEtcd runs an embedded etcd member as its own process: for machines without
// an etcd install, and for multi-process tests that kill members one by one.
// Production should run a real etcd cluster.
func runEtcd(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	data := fs.String("data", "ludus-etcd", "data directory")
	name := fs.String("name", "", "member name (with --initial-cluster)")
	cluster := fs.String("initial-cluster", "", "e.g. a=http://127.0.0.1:2380,b=http://127.0.0.1:2382")
	clientPort := fs.Int("client-port", 2379, "loopback client port")
	peerPort := fs.Int("peer-port", 2380, "loopback peer port")
	election := fs.Duration("election-timeout", 0, "raft election timeout (default etcd's 1s)")
	heartbeat := fs.Duration("heartbeat-interval", 0, "raft heartbeat interval (default etcd's 100ms)")
	noFsync := fs.Bool("unsafe-no-fsync", false, "skip fsync (tests only)")
	retention := fs.Duration("compaction-retention", etcdserver.DefaultCompactionRetention, "how long replaced revisions are kept before compaction")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := etcdserver.Start(ctx, etcdserver.Config{Dir: *data, Name: *name, InitialCluster: *cluster,
		ClientPort: *clientPort, PeerPort: *peerPort, ElectionTimeout: *election, HeartbeatInterval: *heartbeat, NoFsync: *noFsync,
		CompactionRetention: *retention})
	if err != nil {
		return err
	}
	fmt.Printf("etcd serving on %s\n", s.Endpoint)
	logger.Info("etcd member up", "endpoint", s.Endpoint, "name", *name)
	<-ctx.Done()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	return nil
}
