package simnode

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/sdk/abi"
)

// TestBurstOfInputsStaysWithinOneWrite: a chunk of the log is written in one
// etcd request, and etcd refuses a request over 1.5 MiB. Three players each
// sending a burst of large inputs within one flush made a chunk of about
// 2 MB: its write was refused, and the game had to leave its node. The game
// now refuses inputs past maxChunkInputBytes until its next write (the
// client sends them again), writes early, and stays where it is; every
// input it took is in its log.
func TestBurstOfInputsStaysWithinOneWrite(t *testing.T) {
	const tenant = "tenant-burst"
	cn := startClockNode(t, "n-burst", Config{AbandonGrace: -1, IdleEnd: -1})
	id, g := startTimedArena(t, cn, tenant, 600)
	accounts := []string{"ada"}
	for _, a := range []string{"bob", "cy"} {
		cn.join(t, g, tenant, id, a)
		accounts = append(accounts, a)
	}
	const perPlayer = 2500 // 2,500 × (256 + 16) bytes ≈ 0.65 MiB each, ≈ 2 MB in all
	payload := bytes.Repeat([]byte{7}, maxPayloadBytes)
	total := len(accounts) * perPlayer
	replies := make(chan inputResult, total)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, a := range accounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; seq <= perPlayer; seq++ {
				r := make(chan inputResult, 1)
				if err := g.send(ctx, inputReq{account: a, seq: uint64(seq), payload: payload, reply: r}); err != nil {
					replies <- inputResult{err: err}
					continue
				}
				go func() { replies <- <-r }()
			}
		}()
	}
	wg.Wait() // every input reached the game before its next tick
	acked, busy := 0, 0
	for n := 0; n < total; {
		select {
		case r := <-replies:
			n++
			switch {
			case r.err == nil:
				acked++
			case errors.Is(r.err, errLogBusy):
				busy++
			default:
				t.Fatalf("input refused with %v (after %d acknowledged)", r.err, acked)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d inputs answered", n, total)
		default:
			cn.clk.Advance(time.Second / 35)
			time.Sleep(time.Millisecond)
		}
	}
	if busy == 0 {
		t.Fatal("no input was refused: the burst did not pass one write's bound, and this test shows nothing")
	}
	select {
	case <-g.done:
		t.Fatalf("the game left its node: %+v", g.status.load().v)
	default:
	}
	if got, ok := cn.n.game(tenant, id); !ok || got != g {
		t.Fatal("the game no longer runs on its node")
	}
	// Every input acknowledged is in the log, each chunk within the bound.
	_, chunks, err := ReadLog(context.Background(), state, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	for _, c := range chunks {
		size := 0
		for _, e := range c.Entries {
			if e.Event.Kind == abi.EventInput {
				logged++
				size += len(e.Event.Payload) + inputEntryOverhead
			}
		}
		if size > maxChunkInputBytes {
			t.Fatalf("a chunk of ticks %d-%d holds %d input bytes, over the bound of %d", c.From, c.To, size, maxChunkInputBytes)
		}
	}
	if logged < acked {
		t.Fatalf("%d inputs acknowledged, %d in the log", acked, logged)
	}
	t.Logf("%d inputs acknowledged, %d refused until the next write", acked, busy)
}
