package clusterstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/ops/etcdserver"
)

var (
	raw   *clientv3.Client // for writes behind the protocol's back
	state *Client
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "clusterstate-test")
	if err != nil {
		panic(err)
	}
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: dir, NoFsync: true})
	if err != nil {
		panic(err)
	}
	raw, err = es.Client()
	if err != nil {
		panic(err)
	}
	state = New(raw)
	code := m.Run()
	raw.Close()
	es.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// session starts a session for a test; it ends (and its lease is revoked)
// with the test.
func session(t *testing.T) *Session {
	t.Helper()
	life, stop := context.WithCancel(context.Background())
	s, err := state.NewSession(testCtx(t), life, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

var ids atomic.Int64

// uniq returns an id not used before in this process (tests run with -count
// share one etcd).
func uniq(prefix string) string { return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), ids.Add(1)) }

// newGame claims a new game of tenant for node under s.
func newGame(t *testing.T, s *Session, tenant, node string) Claim {
	t.Helper()
	id := uniq("g")
	c, err := state.Claim(testCtx(t), s, GameSpec{TenantID: tenant, GameID: id, BuildID: "b1", Seed: 7}, node)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func chunkAppend(c Claim, seq uint64) Append {
	return Append{Claim: c, Seq: seq, Chunk: []byte(fmt.Sprintf("chunk-%d", seq)),
		Status: GameStatus{State: StateRunning, Tick: int64(seq) * 10, NodeID: c.Node()}}
}

func logLen(t *testing.T, tenant, game string) int {
	t.Helper()
	l, err := state.ReadLog(testCtx(t), tenant, game)
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Chunks)
}

// Nodes racing to create the same game: exactly one wins, every other gets
// ErrGameExists, and the owner key names the winner.
func TestClaimRaceHasOneWinner(t *testing.T) {
	ctx := testCtx(t)
	sessions := make([]*Session, 5)
	for i := range sessions {
		sessions[i] = session(t)
	}
	for round := 0; round < 3; round++ {
		spec := GameSpec{TenantID: "t-race", GameID: uniq("race"), BuildID: "b1"}
		claims := make([]Claim, len(sessions))
		errs := make([]error, len(sessions))
		var wg sync.WaitGroup
		for i, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				claims[i], errs[i] = state.Claim(ctx, s, spec, fmt.Sprintf("node-%d", i))
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: nodes %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, ErrGameExists):
				t.Fatalf("round %d: loser %d got %v, want ErrGameExists", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		o, err := state.Owner(ctx, spec.TenantID, spec.GameID)
		if err != nil || o.Claim != claims[winner] || !sessions[winner].Holds(o) {
			t.Fatalf("round %d: owner %+v (%v), want %+v under the winner's lease", round, o, err, claims[winner])
		}
		g, err := state.View().Game(ctx, spec.TenantID, spec.GameID)
		if err != nil || g.Owner != fmt.Sprintf("node-%d", winner) || g.Status.State != StateRunning {
			t.Fatalf("round %d: view %+v %v", round, g, err)
		}
	}
}

// Orphan claims race too: one node takes a game whose owner vanished, the
// others get ErrClaimed, and nobody claims a game that does not exist.
func TestClaimOrphanRace(t *testing.T) {
	ctx := testCtx(t)
	c := newGame(t, session(t), "t-orphan", "node-a")
	if err := state.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	sessions := []*Session{session(t), session(t), session(t)}
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = state.ClaimOrphan(ctx, s, c.Tenant, c.Game, fmt.Sprintf("node-%d", i))
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
		} else if !errors.Is(err, ErrClaimed) {
			t.Fatalf("loser got %v, want ErrClaimed", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d winners", wins)
	}
	if _, err := state.ClaimOrphan(ctx, sessions[0], c.Tenant, "no-such-game", "node-0"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("claiming a game without a spec: %v", err)
	}
}

// A fenced append is refused once its claim is gone — whether the game was
// taken by another node or its owner key was re-created with the very same
// value (only the create revision differs) — and nothing is written.
func TestAppendRefusedAfterClaimLost(t *testing.T) {
	ctx := testCtx(t)
	a, b := session(t), session(t)
	c := newGame(t, a, "t-fence", "node-a")
	if err := state.Append(ctx, chunkAppend(c, 1)); err != nil {
		t.Fatalf("append under a live claim: %v", err)
	}
	// Another node takes the game (as after a lease lapse).
	if err := state.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	cb, err := state.ClaimOrphan(ctx, b, c.Tenant, c.Game, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := state.Append(ctx, chunkAppend(c, 2)); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("append after the game moved: %v, want ErrClaimLost", err)
	}
	if err := state.Append(ctx, chunkAppend(cb, 2)); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	// The owner key re-created with the same value: the create revision fences.
	if _, err := raw.Delete(ctx, OwnerKey(cb.Tenant, cb.Game)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, OwnerKey(cb.Tenant, cb.Game), cb.Owner); err != nil {
		t.Fatal(err)
	}
	if err := state.Append(ctx, chunkAppend(cb, 3)); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("append after the owner key was re-created: %v, want ErrClaimLost", err)
	}
	if n := logLen(t, c.Tenant, c.Game); n != 2 {
		t.Fatalf("log has %d chunks, want 2", n)
	}
}

// A group commit is all or nothing: one game's lost claim refuses the whole
// transaction (the writer then commits one by one).
func TestAppendAllIsFencedPerGame(t *testing.T) {
	ctx := testCtx(t)
	s := session(t)
	c1, c2 := newGame(t, s, "t-group", "node-a"), newGame(t, s, "t-group", "node-a")
	if err := state.AppendAll(ctx, []Append{chunkAppend(c1, 1), chunkAppend(c2, 1)}); err != nil {
		t.Fatal(err)
	}
	lost := c2
	lost.Owner = OwnerValue("node-a", "someone-elses-claim")
	if err := state.AppendAll(ctx, []Append{chunkAppend(c1, 2), chunkAppend(lost, 2)}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("group with a lost claim: %v", err)
	}
	if n1, n2 := logLen(t, c1.Tenant, c1.Game), logLen(t, c2.Tenant, c2.Game); n1 != 1 || n2 != 1 {
		t.Fatalf("a refused group wrote: %d and %d chunks", n1, n2)
	}
	many := make([]Append, MaxAppendsPerTxn)
	for i := range many {
		c := newGame(t, s, "t-group", "node-a")
		many[i] = chunkAppend(c, 1)
		many[i].Checkpoint = []byte("ck")
		many[i].Final = i%2 == 0
	}
	if err := state.AppendAll(ctx, many); err != nil {
		t.Fatalf("MaxAppendsPerTxn appends in one transaction: %v", err)
	}
	// Bytes: appends of MaxAppendBytesPerTxn in all commit together; three
	// of the largest checkpoints (512 KiB) in one request are too many for
	// etcd, which is why the log writer counts bytes (simnode nextGroup).
	big := func(ck int) Append {
		a := chunkAppend(newGame(t, s, "t-group", "node-a"), 1)
		a.Checkpoint = bytes.Repeat([]byte{'c'}, ck)
		return a
	}
	fit := []Append{big(0), big(0)}
	for i := range fit {
		fit[i].Checkpoint = bytes.Repeat([]byte{'c'}, MaxAppendBytesPerTxn/2-fit[i].Size())
	}
	if n := fit[0].Size() + fit[1].Size(); n != MaxAppendBytesPerTxn {
		t.Fatalf("test appends of %d bytes, want %d", n, MaxAppendBytesPerTxn)
	}
	if err := state.AppendAll(ctx, fit); err != nil {
		t.Fatalf("MaxAppendBytesPerTxn bytes of appends in one transaction: %v", err)
	}
	if err := state.AppendAll(ctx, []Append{big(512 << 10), big(512 << 10), big(512 << 10)}); err == nil {
		t.Fatal("etcd took three 512 KiB checkpoints in one request: MaxAppendBytesPerTxn could be larger")
	}
}

// A handoff moves the owner key in the append's transaction, to the target's
// lease: the target's claim appends, the old one is fenced out.
func TestHandoff(t *testing.T) {
	ctx := testCtx(t)
	a, b := session(t), session(t)
	c := newGame(t, a, "t-handoff", "node-a")
	to := NodeInfo{ID: "node-b", Addr: "http://b", Capacity: 4, Lease: b.Lease()}
	app := chunkAppend(c, 1)
	app.Handoff = NewHandoff(to)
	app.Status.NodeID = to.ID
	if err := state.Append(ctx, app); err != nil {
		t.Fatal(err)
	}
	o, err := state.Owner(ctx, c.Tenant, c.Game)
	if err != nil || o.Node() != "node-b" || o.Owner != app.Handoff.Owner || !b.Holds(o) || a.Holds(o) {
		t.Fatalf("owner after handoff: %+v %v", o, err)
	}
	// The key was overwritten, not re-created: the create revision stays, and
	// the new value fences the old claim out.
	if o.Fence != c.Fence {
		t.Fatalf("handoff re-created the owner key: fence %d, was %d", o.Fence, c.Fence)
	}
	if err := state.Append(ctx, chunkAppend(c, 2)); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("the old owner appended after the handoff: %v", err)
	}
	if err := state.Append(ctx, chunkAppend(o.Claim, 2)); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	// The owner key lives and dies with the target's lease.
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(b.Lease())); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Owner(ctx, c.Tenant, c.Game); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("owner after the target's lease ended: %v, want ErrNoOwner", err)
	}
}

// Release and Fail act only for the claim that holds the owner key; a final
// append releases the game and drops its checkpoint.
func TestReleaseFailAndFinal(t *testing.T) {
	ctx := testCtx(t)
	s := session(t)
	c := newGame(t, s, "t-release", "node-a")
	stale := c
	stale.Owner = OwnerValue("node-a", "stale")
	if err := state.Release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Owner(ctx, c.Tenant, c.Game); err != nil {
		t.Fatalf("a stale claim's release removed the owner: %v", err)
	}
	if err := state.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Owner(ctx, c.Tenant, c.Game); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("after release: %v", err)
	}

	c = newGame(t, s, "t-release", "node-a")
	if err := state.Fail(ctx, stale, GameStatus{State: StateFailed}); err != nil {
		t.Fatal(err)
	}
	if g, _ := state.View().Game(ctx, c.Tenant, c.Game); g.Status.State != StateRunning || g.Owner == "" {
		t.Fatalf("a stale claim failed the game: %+v", g)
	}
	if err := state.Fail(ctx, c, GameStatus{State: StateFailed, Message: "desync"}); err != nil {
		t.Fatal(err)
	}
	if g, _ := state.View().Game(ctx, c.Tenant, c.Game); g.Status.State != StateFailed || g.Status.Message != "desync" || g.Owner != "" {
		t.Fatalf("after Fail: %+v", g)
	}

	c = newGame(t, s, "t-release", "node-a")
	ck := chunkAppend(c, 1)
	ck.Checkpoint = []byte("state")
	if err := state.Append(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if b, err := state.Checkpoint(ctx, c.Tenant, c.Game); err != nil || string(b) != "state" {
		t.Fatalf("checkpoint %q %v", b, err)
	}
	final := chunkAppend(c, 2)
	final.Final, final.Status.State = true, StateEnded
	if err := state.Append(ctx, final); err != nil {
		t.Fatal(err)
	}
	if b, err := state.Checkpoint(ctx, c.Tenant, c.Game); err != nil || b != nil {
		t.Fatalf("checkpoint after the final append: %q %v", b, err)
	}
	l, err := state.ReadLog(ctx, c.Tenant, c.Game)
	if err != nil || l.Owner != "" || !l.Status.Finished() || len(l.Chunks) != 2 || l.Chunks[1].Seq != 2 {
		t.Fatalf("log after the final append: %+v %v", l, err)
	}
	// Archived: every key goes, but only for the spec that was read.
	if ok, err := state.RemoveGame(ctx, c.Tenant, c.Game, l.SpecRevision+1); err != nil || ok {
		t.Fatalf("RemoveGame of another spec: %v %v", ok, err)
	}
	if ok, err := state.RemoveGame(ctx, c.Tenant, c.Game, l.SpecRevision); err != nil || !ok {
		t.Fatalf("RemoveGame: %v %v", ok, err)
	}
	if _, err := state.ReadLog(ctx, c.Tenant, c.Game); !errors.Is(err, ErrGameNotFound) {
		t.Fatalf("after RemoveGame: %v", err)
	}
}

// Reclaim moves a claim of an older session to the current one, keeping the
// fence; the old claim value is fenced out, and a stale claim is not moved.
func TestReclaim(t *testing.T) {
	ctx := testCtx(t)
	old, cur := session(t), session(t)
	c := newGame(t, old, "t-reclaim", "node-a")
	next, err := state.Reclaim(ctx, cur, c)
	if err != nil {
		t.Fatal(err)
	}
	o, err := state.Owner(ctx, c.Tenant, c.Game)
	if err != nil || o.Claim != next || !cur.Holds(o) || next.Fence != c.Fence || next.Node() != "node-a" {
		t.Fatalf("after Reclaim: %+v %v (next %+v)", o, err, next)
	}
	if err := state.Append(ctx, chunkAppend(c, 1)); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("append under the old claim: %v", err)
	}
	if _, err := state.Reclaim(ctx, cur, c); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("reclaiming a stale claim: %v, want ErrClaimLost", err)
	}
	// The old lease ends: the game stays claimed.
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := state.Append(ctx, chunkAppend(next, 1)); err != nil {
		t.Fatalf("append after the old lease ended: %v", err)
	}
}

// Every "not there" has its own sentinel, with the package's prefix.
func TestSentinelErrors(t *testing.T) {
	ctx := testCtx(t)
	cases := []struct {
		err  error
		want error
	}{}
	_, err := state.View().Game(ctx, "t-none", "nope")
	cases = append(cases, struct{ err, want error }{err, ErrGameNotFound})
	_, err = state.View().Game(ctx, "t-none", "bad/id")
	cases = append(cases, struct{ err, want error }{err, ErrGameNotFound})
	_, err = state.View().Node(ctx, "nope")
	cases = append(cases, struct{ err, want error }{err, ErrNodeNotFound})
	_, err = state.Owner(ctx, "t-none", "nope")
	cases = append(cases, struct{ err, want error }{err, ErrNoOwner})
	_, err = state.ReadLog(ctx, "t-none", "nope")
	cases = append(cases, struct{ err, want error }{err, ErrGameNotFound})
	s := session(t)
	if s.Err() != nil || s.Fenced() {
		t.Fatalf("a new session is fenced: %v", s.Err())
	}
	s.Fence("test")
	cases = append(cases, struct{ err, want error }{s.Err(), ErrSessionFenced})
	for i, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("case %d: %v is not %v", i, c.err, c.want)
		}
		if c.err != nil && !strings.HasPrefix(c.err.Error(), "clusterstate: ") {
			t.Errorf("case %d: %q lacks the package prefix", i, c.err)
		}
	}
}

// A session whose lease is lost (revoked here, as an expiry reported by etcd
// would be) fences itself at once; ending its life does not fence it.
func TestSessionFencesWhenTheLeaseIsLost(t *testing.T) {
	ctx := testCtx(t)
	s := session(t)
	info := NodeInfo{ID: uniq("node-lost"), Addr: "http://x", Capacity: 1}
	if err := state.PublishNode(ctx, s, info); err != nil {
		t.Fatal(err)
	}
	if n, err := state.View().Node(ctx, info.ID); err != nil || n.Lease != s.Lease() {
		t.Fatalf("published node %+v %v", n, err)
	}
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(s.Lease())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not fence itself after its lease was revoked")
	}
	if !errors.Is(s.Err(), ErrSessionFenced) {
		t.Fatalf("Err %v", s.Err())
	}
	if _, err := state.View().Node(ctx, info.ID); !errors.Is(err, ErrNodeNotFound) {
		t.Fatalf("node record after its lease ended: %v", err)
	}

	life, stop := context.WithCancel(context.Background())
	s2, err := state.NewSession(ctx, life, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	stop()
	time.Sleep(1500 * time.Millisecond) // past 2/3 of the TTL without renewals
	if s2.Fenced() {
		t.Fatalf("ending a session's life fenced it: %v", s2.Err())
	}
}

// WatchOwners reports claims, handoffs and releases; ScanGames sees games and
// owners at one revision.
func TestWatchOwnersAndScan(t *testing.T) {
	ctx := testCtx(t)
	s := session(t)
	rev, err := state.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := state.WatchOwners(wctx, OwnerWatch{Tenant: "t-watch", From: rev + 1, RequireLeader: true})
	c := newGame(t, s, "t-watch", "node-a")
	newGame(t, s, "t-other", "node-a") // another tenant: not reported
	if err := state.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	var got []OwnerEvent
	for len(got) < 2 {
		select {
		case evs, ok := <-events:
			if !ok {
				t.Fatal("the watch ended")
			}
			got = append(got, evs...)
		case <-ctx.Done():
			t.Fatalf("events so far: %+v", got)
		}
	}
	if got[0].Deleted || got[0].Claim != c || !s.Holds(got[0].Owner) || !got[1].Deleted || got[1].Game != c.Game || len(got) != 2 {
		t.Fatalf("events %+v, want the claim of %+v then its release", got, c)
	}

	games, _, err := state.ScanGames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range games {
		if g.Tenant == c.Tenant && g.Game == c.Game {
			found = true
			if g.Owned || g.Status.State != StateRunning {
				t.Fatalf("scan: %+v", g)
			}
		}
	}
	if !found {
		t.Fatal("ScanGames missed a game")
	}
}

// WatchLog continues ReadLog from its revision.
func TestReadAndWatchLog(t *testing.T) {
	ctx := testCtx(t)
	c := newGame(t, session(t), "t-log", "node-a")
	for seq := uint64(1); seq <= 2; seq++ {
		if err := state.Append(ctx, chunkAppend(c, seq)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := state.ReadLog(ctx, c.Tenant, c.Game)
	if err != nil || len(l.Chunks) != 2 || l.Spec.Seed != 7 || l.Owner != c.Owner || l.Status.Tick != 20 {
		t.Fatalf("ReadLog: %+v %v", l, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := state.WatchLog(wctx, c.Tenant, c.Game, l.Revision+1)
	if err := state.Append(ctx, chunkAppend(c, 3)); err != nil {
		t.Fatal(err)
	}
	select {
	case lc := <-chunks:
		if lc.Seq != 3 || string(lc.Data) != "chunk-3" {
			t.Fatalf("watched %+v", lc)
		}
	case <-ctx.Done():
		t.Fatal("no chunk watched")
	}
}

// AwaitDrain returns once the drain key is set, whether before or after it
// started waiting.
func TestDrain(t *testing.T) {
	ctx := testCtx(t)
	node := uniq("node-drain")
	done := make(chan error, 1)
	go func() { done <- state.AwaitDrain(ctx, node) }()
	select {
	case err := <-done:
		t.Fatalf("AwaitDrain returned before the drain was requested: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := state.RequestDrain(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := state.AwaitDrain(ctx, node); err != nil {
		t.Fatalf("drain already requested: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := state.AwaitDrain(short, uniq("node-not-drained")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitDrain without a drain: %v", err)
	}
}
