package etcdserver

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Replaced revisions are compacted away once they are older than
// CompactionRetention: a read of one then fails with ErrCompacted, and the
// key's current value stays.
func TestCompactionRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Dir: t.TempDir(), NoFsync: true, CompactionRetention: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cli, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	first, err := cli.Put(ctx, "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision)); err != nil || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("the replaced revision before any compaction: %v %v", resp, err)
	}
	for {
		// Later writes give the compactor newer revisions to compact to.
		if _, err := cli.Put(ctx, "other", time.Now().String()); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the replaced revision was never compacted")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if resp, err := cli.Get(ctx, "k"); err != nil || string(resp.Kvs[0].Value) != "v2" {
		t.Fatalf("the current value after compaction: %v %v", resp, err)
	}
}

// A port taken before etcd binds it is an EADDRINUSE error, which Start
// retries with new ports when it picked them itself.
func TestTakenPortIsAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	_, err = start(context.Background(), Config{Dir: t.TempDir(), NoFsync: true, ClientPort: taken})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("etcd on a taken port: %v, want EADDRINUSE", err)
	}
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
