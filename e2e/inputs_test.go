package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode"
)

// Finding 2 of the chaos run: a Play stream carried at most ~4 inputs/s,
// because the gateway forwarded its inputs one at a time, each waiting for
// its durable flush. Inputs are now pipelined: a native client's 30 inputs/s
// are all acknowledged, with an ack latency of about one flush interval.
func TestPlayCarries30InputsPerSecond(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pl := login(t, protocols()[1], "demo")
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	st := pl.games.Play(ctx)
	defer st.CloseResponse()
	if err := st.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: id}}}); err != nil {
		t.Fatal(err)
	}
	const count = 150 // 5 s at 30 inputs/s
	var mu sync.Mutex
	sentAt := map[uint64]time.Time{}
	go func() {
		tk := time.NewTicker(time.Second / 30)
		defer tk.Stop()
		for seq := uint64(1); seq <= count; seq++ {
			<-tk.C
			mu.Lock()
			sentAt[seq] = time.Now()
			mu.Unlock()
			if st.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: seq, Payload: []byte{byte(seq % 16)}}}}) != nil {
				return
			}
		}
	}()
	var lat []time.Duration
	next := uint64(1)
	for next <= count {
		m, err := st.Receive()
		if err != nil {
			t.Fatalf("Play ended after %d acks: %v", next-1, err)
		}
		a := m.GetAck()
		if a == nil {
			continue
		}
		if a.AckedSeq != next {
			t.Fatalf("ack for seq %d, want %d (one ack per input, in order)", a.AckedSeq, next)
		}
		mu.Lock()
		lat = append(lat, time.Since(sentAt[a.AckedSeq]))
		mu.Unlock()
		next++
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("150 Play inputs at 30/s: ack p50 %v p99 %v", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	// Generous for a loaded CI machine; the bench reports the real figure.
	if p99 > 2*time.Second {
		t.Fatalf("ack p99 %v at 30 inputs/s", p99)
	}
	// Every acknowledged input is in the log, or was superseded by one that is.
	time.Sleep(500 * time.Millisecond)
	_, chunks, err := simnode.ReadLog(ctx, stack.Etcd, stack.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	for _, ch := range chunks {
		for _, e := range ch.Entries {
			if e.Event.Kind == abi.EventInput && e.Seq > 0 {
				logged++
			}
		}
	}
	if logged != count {
		t.Fatalf("log holds %d of the %d acknowledged Play inputs", logged, count)
	}
}

// Finding 3: while a game moves, SendInput answered NotFound ("not running on
// node …") and leaked transport errors with node addresses. A game that exists
// answers OK or Unavailable while it moves, and nothing internal reaches the
// player; NotFound is kept for games that do not exist.
func TestMovingGameAnswersRetryableCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pl := login(t, protocols()[0], "demo")
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: "no-such-game", Seq: 1, Payload: []byte{1}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("input to a game that does not exist: %v, want NotFound", err)
	}
	fleetc := ludusv1connect.NewFleetServiceClient(h2cClient(), stack.GatewayURL, connect.WithGRPC(), connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	stop := make(chan struct{})
	var moves sync.WaitGroup
	moves.Add(1)
	go func() {
		defer moves.Done()
		defer close(stop)
		for range 4 {
			if _, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: id})); err != nil {
				t.Errorf("handoff: %v", err)
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	// Three inputs in flight at a time, as the web client keeps them.
	var mu sync.Mutex
	var oks, retries int
	var bad []string
	var seq uint64
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				seq++
				s := seq
				mu.Unlock()
				_, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: s, Payload: []byte{byte(s % 16)}}))
				mu.Lock()
				switch {
				case err == nil:
					oks++
				case connect.CodeOf(err) == connect.CodeUnavailable:
					retries++
				default:
					bad = append(bad, err.Error())
				}
				if err != nil {
					for _, leak := range []string{"127.0.0.1", "http://", "NodeService", "connection reset"} {
						if strings.Contains(err.Error(), leak) {
							bad = append(bad, "leaks "+leak+": "+err.Error())
						}
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // stay under the account's input rate
			}
		}()
	}
	wg.Wait()
	moves.Wait()
	t.Logf("4 handoffs: %d inputs OK, %d Unavailable", oks, retries)
	if len(bad) > 0 {
		t.Fatalf("%d inputs got codes a client cannot act on, e.g. %s", len(bad), fmt.Sprint(bad[:min(3, len(bad))]))
	}
	if oks == 0 {
		t.Fatal("no input was acknowledged")
	}
}
