package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/gateway/framecodec/arenatrace"
)

// A short script with all three phases (the walk veers right every 2 s).
var shortScript = arenatrace.Script{Standing: time.Second, Walking: 3 * time.Second, Turning: 2 * time.Second}

func TestSnapshotTraceMatchesArenatrace(t *testing.T) {
	ticks, views, err := arenatrace.Frames(shortScript)
	if err != nil {
		t.Fatal(err)
	}
	var snaps, frames int
	var distinct [][]byte
	err = runSnapshotTrace(shortScript, func(tick int64, snap, frame []byte) bool {
		if tick != int64(snaps+1) {
			t.Fatalf("tick %d after %d snapshots", tick, snaps)
		}
		snaps++
		if len(snap) != arena.SnapshotPlayerSize {
			t.Fatalf("tick %d: snapshot of %d bytes, want a player snapshot (%d)", tick, len(snap), arena.SnapshotPlayerSize)
		}
		if len(distinct) == 0 || !bytes.Equal(distinct[len(distinct)-1], snap) {
			distinct = append(distinct, bytes.Clone(snap))
		}
		if frame == nil {
			if tick%arena.FrameDivisor == 0 {
				t.Fatalf("tick %d: no pixels on a frame tick", tick)
			}
			return true
		}
		if frames >= len(views) || ticks[frames] != tick {
			t.Fatalf("pixels at tick %d, arenatrace's frame %d is at another tick", tick, frames)
		}
		if !bytes.Equal(frame, views[frames]) {
			t.Fatalf("tick %d: pixels differ from arenatrace's", tick)
		}
		frames++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 * arena.TickRate; snaps != want || frames != len(views) {
		t.Errorf("%d snapshots and %d frames, want %d and %d", snaps, frames, want, len(views))
	}
	if len(distinct) < snaps/4 {
		t.Errorf("only %d distinct consecutive snapshots in %d ticks: the player did not move", len(distinct), snaps)
	}
}

func TestBenchSnapshotBytes(t *testing.T) {
	ticks, views, err := arenatrace.Frames(shortScript)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]any{"deflate_bytes_per_sec": int64(200000)}
	if err := benchSnapshotBytes(context.Background(), io.Discard, shortScript, ticks, views, res); err != nil {
		t.Fatal(err)
	}
	raw := res["snapshot_raw_bytes_per_sec"].(int64)
	if raw != arena.SnapshotPlayerSize*arena.TickRate {
		t.Errorf("raw %d B/s, want %d", raw, arena.SnapshotPlayerSize*arena.TickRate)
	}
	for _, k := range []string{"snapshot_bytes_per_sec", "snapshot_zstd_bytes_per_sec"} {
		v := res[k].(int64)
		if v <= 0 || v >= raw {
			t.Errorf("%s = %d, want between 0 and the raw %d", k, v, raw)
		}
	}
	if g := res["snapshot_grpc_bytes_per_sec"].(int64); g <= res["snapshot_bytes_per_sec"].(int64) {
		t.Errorf("with gRPC framing %d B/s, not more than the payloads' %d", g, res["snapshot_bytes_per_sec"])
	}
	// 6 s with a keyframe every 2 s of game time.
	if k := res["snapshot_keyframes"].(int); k != 3 {
		t.Errorf("%d keyframes, want 3", k)
	}
	if r := res["snapshot_vs_pixels"].(float64); r <= 0 || r >= 1 {
		t.Errorf("snapshot_vs_pixels %v", r)
	}
	// Pixels that are not the trace's are refused: both figures must come
	// from one trace.
	views[len(views)/2] = bytes.Clone(views[len(views)/2])
	views[len(views)/2][1000] ^= 1
	if err := benchSnapshotBytes(context.Background(), io.Discard, shortScript, ticks, views, map[string]any{}); err == nil {
		t.Error("pixels that differ from the trace's were accepted")
	}
}
