package simnode

import (
	"bytes"
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
)

// collect reads a node stream until it has n frames; it returns them and
// the first status.
func collect(t *testing.T, c clusterv1connect.NodeServiceClient, req *clusterv1.StreamFramesRequest, n int) ([]*ludusv1.Frame, *ludusv1.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// One client: its streams (two at once, to compare deliveries) share a
	// controller, so neither takes the slot from the other.
	r := connect.NewRequest(req)
	r.Header().Set(ControllerHeader, "views-test")
	st, err := c.StreamFrames(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var frames []*ludusv1.Frame
	var status *ludusv1.Status
	for len(frames) < n && st.Receive() {
		if f := st.Msg().GetFrame(); f != nil {
			frames = append(frames, f)
		} else if status == nil {
			status = st.Msg().GetStatus()
		}
	}
	if len(frames) < n {
		t.Fatalf("%d of %d frames: %v", len(frames), n, st.Err())
	}
	return frames, status
}

// A snapshot stream gets the module's snapshot every tick; a pixel stream of
// the same view gets indexed8 frames at the frame rate, drawn on the node by
// the module's ludus_render from the same snapshots; a module without a
// renderer refuses snapshots with FailedPrecondition.
func TestSnapshotAndPixelDelivery(t *testing.T) {
	_, c := startNode(t, "n-views")
	id := createGame(t, c, "tenant-views", 3)
	if _, err := c.JoinGame(context.Background(), connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: "tenant-views", GameId: id, AccountId: "acc-1"})); err != nil {
		t.Fatal(err)
	}
	mod, err := testEng.Compile(context.Background(), builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	if !mod.HasRenderer {
		t.Fatal("the arena module has no renderer")
	}
	for _, spectator := range []bool{false, true} {
		acc := "acc-1"
		if spectator {
			acc = ""
		}
		snaps, st := collect(t, c, &clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: id, AccountId: acc, Spectator: spectator, Delivery: ludusv1.Delivery_DELIVERY_SNAPSHOTS}, 20)
		if st.Delivery != deliverySnapshots || st.SnapshotFormat == "" || st.BuildId != arenaID {
			t.Fatalf("snapshot stream status %+v", st)
		}
		// Every tick is published; a stream that reads slowly (here, -race on a
		// loaded machine) skips to the newest, so most steps are one tick.
		single := 0
		for i := 1; i < len(snaps); i++ {
			if snaps[i].Tick <= snaps[i-1].Tick {
				t.Fatalf("snapshots at ticks %d then %d", snaps[i-1].Tick, snaps[i].Tick)
			}
			if snaps[i].Tick == snaps[i-1].Tick+1 {
				single++
			}
		}
		if single < len(snaps)/2 {
			t.Fatalf("only %d of %d snapshots came one tick apart: snapshots are not published every tick", single, len(snaps)-1)
		}
		if _, _, _, _, err := abi.ParseIndexed8(snaps[0].View); err == nil {
			t.Fatal("a snapshot stream carried a rendered frame")
		}
		pixels, pst := collect(t, c, &clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: id, AccountId: acc, Spectator: spectator, Delivery: ludusv1.Delivery_DELIVERY_PIXELS}, 5)
		if pst.Delivery != deliveryPixels {
			t.Fatalf("pixel stream status %+v", pst)
		}
		for _, f := range pixels {
			if _, _, _, _, err := abi.ParseIndexed8(f.View); err != nil {
				t.Fatalf("pixel frame: %v", err)
			}
		}
		// The node's frame is the module's rendering of the snapshot: watch both
		// at once and compare a tick both saw, byte for byte.
		var snapsBoth, pixBoth []*ludusv1.Frame
		done := make(chan struct{})
		go func() {
			defer close(done)
			snapsBoth, _ = collect(t, c, &clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: id, AccountId: acc, Spectator: spectator, Delivery: ludusv1.Delivery_DELIVERY_SNAPSHOTS}, 40)
		}()
		pixBoth, _ = collect(t, c, &clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: id, AccountId: acc, Spectator: spectator, Delivery: ludusv1.Delivery_DELIVERY_PIXELS}, 10)
		<-done
		r, err := mod.NewRenderer(context.Background(), engine.InstanceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		compared := 0
		for _, p := range pixBoth {
			for _, sn := range snapsBoth {
				if sn.Tick != p.Tick {
					continue
				}
				px, err := r.Render(context.Background(), sn.View)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(px, p.View) {
					t.Fatalf("tick %d: the node's pixel frame differs from the module's rendering of the snapshot", p.Tick)
				}
				compared++
			}
		}
		r.Close(context.Background())
		if compared == 0 {
			t.Fatal("no tick seen by both streams")
		}
	}
	// Unset delivery is pixels, as older clients expect.
	_, st := collect(t, c, &clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: id, AccountId: "acc-1"}, 1)
	if st.Delivery != deliveryPixels {
		t.Fatalf("unset delivery gave %q", st.Delivery)
	}

	pong := startModuleGame(t, c, "tenant-views", pongID, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: "tenant-views", GameId: pong, AccountId: "acc-1", Delivery: ludusv1.Delivery_DELIVERY_SNAPSHOTS}))
	if err == nil {
		s.Receive()
		err = s.Err()
	}
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !bytes.Contains([]byte(err.Error()), []byte("DELIVERY_PIXELS")) {
		t.Fatalf("snapshots of a module without a renderer: %v; want FailedPrecondition naming DELIVERY_PIXELS", err)
	}
}
