package etcdserver

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A three-member cluster keeps serving when its leader is killed: another
// member leads, what was written before is there, and writes go on.
func TestClusterSurvivesItsLeadersDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	members, err := StartCluster(ctx, t.TempDir(), 3, Config{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, m := range members {
			m.Close()
		}
	}()
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.Endpoint)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, members)
	members[leader].Kill()
	killed := members[leader]
	members = append(members[:leader:leader], members[leader+1:]...)
	defer killed.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(wctx, "after", "2")
		wcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write accepted 20 s after the leader died: %v", err)
		}
	}
	if leaderOf(t, members) < 0 {
		t.Fatal("no leader among the two members left")
	}
	resp, err := cli.Get(ctx, "before")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("the write before the leader died: %v %v", resp, err)
	}
}

// leaderOf waits for one of members to lead and returns its index.
func leaderOf(t *testing.T, members []*Server) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, m := range members {
			if m.Leader() {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no member leads after 20 s")
	return -1
}
