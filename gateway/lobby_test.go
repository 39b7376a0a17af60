package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// blockingReads is a game-list read that waits to be released, numbering
// its reads: read n answers one game called "read-n".
type blockingReads struct {
	n       atomic.Int32
	started chan int
	release chan error
}

func newBlockingReads() *blockingReads {
	return &blockingReads{started: make(chan int, 16), release: make(chan error)}
}

func (b *blockingReads) read(ctx context.Context, tenant string) ([]clusterstate.Game, error) {
	n := int(b.n.Add(1))
	b.started <- n
	select {
	case err := <-b.release:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []clusterstate.Game{{Spec: clusterstate.GameSpec{GameID: fmt.Sprintf("read-%d", n)}}}, nil
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLobbyReadsShareFreshReads: calls that arrive while a tenant's read
// runs share one read, which starts after that read ends, so each call's
// answer comes from a read that started after it; other tenants read on
// their own; a caller that gives up leaves the others their answer; a
// failed read fails the calls that shared it, and the next call reads anew.
func TestLobbyReadsShareFreshReads(t *testing.T) {
	t.Parallel()
	b := newBlockingReads()
	l := newLobbyReads(b.read)
	ctx := context.Background()
	type answer struct {
		games []clusterstate.Game
		err   error
	}
	call := func(ctx context.Context, tenant string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			g, err := l.games(ctx, tenant)
			ch <- answer{g, err}
		}()
		return ch
	}
	first := call(ctx, "t1")
	if n := <-b.started; n != 1 {
		t.Fatalf("read %d started first", n)
	}
	var later []chan answer
	for range 10 {
		later = append(later, call(ctx, "t1"))
	}
	quitter, quit := context.WithCancel(ctx)
	gaveUp := call(quitter, "t1")
	waitFor(t, "11 calls sharing the next read", func() bool { return l.sharing("t1") == 11 })
	quit()
	if a := <-gaveUp; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a call that gave up: %v", a.err)
	}
	other := call(ctx, "t2") // another tenant does not wait for t1's reads
	if n := <-b.started; n != 2 {
		t.Fatalf("read %d started for t2", n)
	}
	b.release <- nil // one of the two running reads
	b.release <- nil // the other
	for _, ch := range []chan answer{first, other} {
		if a := <-ch; a.err != nil || len(a.games) != 1 {
			t.Fatalf("a call that read alone: %+v", a)
		}
	}
	// The ten waited for the first read and share the next one.
	if n := <-b.started; n != 3 {
		t.Fatalf("read %d started for the sharing calls", n)
	}
	b.release <- nil
	for i, ch := range later {
		if a := <-ch; a.err != nil || len(a.games) != 1 || a.games[0].Spec.GameID != "read-3" {
			t.Fatalf("sharing call %d: %+v, want read-3's answer", i, a)
		}
	}
	if got := b.n.Load(); got != 3 {
		t.Fatalf("%d reads for 13 calls, want 3", got)
	}

	// A failed read fails the calls that share it; the next call reads again.
	first = call(ctx, "t1")
	<-b.started
	sharing := []chan answer{call(ctx, "t1"), call(ctx, "t1")}
	waitFor(t, "2 calls sharing", func() bool { return l.sharing("t1") == 2 })
	b.release <- nil
	<-first
	<-b.started
	b.release <- errors.New("etcd: no leader")
	for _, ch := range sharing {
		if a := <-ch; a.err == nil {
			t.Fatal("a call that shared a failed read succeeded")
		}
	}
	again := call(ctx, "t1")
	<-b.started
	b.release <- nil
	if a := <-again; a.err != nil {
		t.Fatalf("the call after a failed read: %v", a.err)
	}
}

// TestFakeListGamesListsTheNewestRunning: ListGames answers the newest
// MaxListedGames running games, newest first, and leaves out games that are
// not running; concurrent calls each get the whole answer.
func TestFakeListGamesListsTheNewestRunning(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const games = MaxListedGames + 40 // a tenth of them ended: 216 running
	for i := range games {
		id := fmt.Sprintf("g%04d", i)
		c.put(clusterstate.GameKey(tenantT1, id), clusterstate.GameSpec{TenantID: tenantT1, GameID: id, ModuleName: "arena", BuildID: fakeBuildID,
			CreatedAt: base.Add(time.Duration(i) * time.Second), TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "fake"})
		state := clusterstate.StateRunning
		if i%10 == 9 {
			state = clusterstate.StateEnded // not listed
		}
		c.put(clusterstate.StatusKey(tenantT1, id), clusterstate.GameStatus{State: state, NodeID: "node-a"})
		c.setOwner(tenantT1, id, "node-a")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.client(ticketAlice).ListGames(context.Background(), connect.NewRequest(&ludusv1.ListGamesRequest{}))
			if err != nil {
				t.Error(err)
				return
			}
			got := resp.Msg.Games
			if len(got) != MaxListedGames {
				t.Errorf("%d games listed, want %d", len(got), MaxListedGames)
				return
			}
			// Newest first, skipping the ended ones (g0239 ended: g0238 is first).
			want := games - 1
			for _, g := range got {
				for want%10 == 9 {
					want--
				}
				if g.GameId != fmt.Sprintf("g%04d", want) {
					t.Errorf("listed %s where g%04d was due", g.GameId, want)
					return
				}
				want--
			}
		}()
	}
	wg.Wait()
}
