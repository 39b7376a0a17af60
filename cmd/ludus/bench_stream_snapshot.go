package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/gateway/framecodec"
	"ludus.dev/ludus/gateway/framecodec/arenatrace"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Snapshot delivery in `ludus bench stream`: the bytes per second one player's
// stream costs when the node sends the player's snapshot every tick (35/s)
// and the client renders it, on the same scripted 60 s trace as the pixel
// figures, through the same codec.

// runSnapshotTrace plays arenatrace's script (arenatrace.Play) and calls fn
// on every tick with slot 0's snapshot (arena View(0)) and, on the ticks
// arenatrace takes a view (every frame_divisor ticks), the pixels too
// (the snapshot drawn by the arena's renderer); frame is nil on the other
// ticks. Both are valid only during the call. It stops early if fn returns
// false. TestSnapshotTraceMatchesArenatrace checks that the pixels are
// arenatrace's, frame for frame.
func runSnapshotTrace(s arenatrace.Script, fn func(tick int64, snap, frame []byte) bool) error {
	return arenatrace.Play(s, func(tick int64, g *arena.Game) bool {
		snap := g.View(0)
		var frame []byte
		if tick%arena.FrameDivisor == 0 {
			frame = g.Render(snap)
		}
		return fn(tick, snap, frame)
	})
}

// grpcMessageBytes is what one frame costs on a gRPC StreamFrames stream
// besides HTTP/2 framing: the StreamFramesResponse protobuf and gRPC's 5-byte
// message prefix.
func grpcMessageBytes(f *ludusv1.Frame) int {
	return 5 + proto.Size(&ludusv1.StreamFramesResponse{Msg: &ludusv1.StreamFramesResponse_Frame{Frame: f}})
}

// benchSnapshotBytes adds the snapshot figures to res: the trace's snapshots
// of slot 0, every tick, through the delta codec with deflate (what browsers
// ask for) and zstd, keyframes every 2 s of game time as the gateway sends
// them. ticks and views are arenatrace's pixel frames of script, from the same run: the
// trace's pixels must be exactly those, so both figures describe one trace.
func benchSnapshotBytes(ctx context.Context, progress io.Writer, script arenatrace.Script, ticks []int64, views [][]byte, res map[string]any) error {
	fmt.Fprintln(progress, "playing the trace again for slot 0's snapshots (every tick)...")
	var snapTicks []int64
	var snaps [][]byte
	k := 0
	var mismatch error
	err := runSnapshotTrace(script, func(tick int64, snap, frame []byte) bool {
		snapTicks = append(snapTicks, tick)
		snaps = append(snaps, bytes.Clone(snap))
		if frame != nil {
			if k >= len(views) || ticks[k] != tick || !bytes.Equal(frame, views[k]) {
				mismatch = fmt.Errorf("the snapshot trace's pixels differ from arenatrace's at tick %d", tick)
				return false
			}
			k++
		}
		return true
	})
	if err != nil {
		return err
	}
	if mismatch != nil {
		return mismatch
	}
	if k != len(views) {
		return fmt.Errorf("the snapshot trace rendered %d frames, arenatrace %d", k, len(views))
	}
	seconds := float64(len(snaps)) / arena.TickRate
	raw := 0
	for _, s := range snaps {
		raw += len(s)
	}
	res["snapshots"] = len(snaps)
	res["snapshot_size_bytes"] = len(snaps[0])
	res["snapshots_per_sec"] = arena.TickRate
	res["snapshot_raw_bytes_per_sec"] = round(float64(raw) / seconds)
	for _, c := range []framecodec.Compression{framecodec.Deflate, framecodec.Zstd} {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(progress, "encoding the snapshots with %s...\n", c)
		enc := framecodec.NewEncoder(framecodec.EncoderOptions{Compression: c, KeyframeTicks: 2 * arena.TickRate})
		dec := &framecodec.Decoder{}
		var total, framed, keyframes, keyBytes int
		us := make([]float64, 0, len(snaps))
		var buf []byte
		for i, s := range snaps {
			start := time.Now()
			out, info, err := enc.Encode(buf[:0], snapTicks[i], s)
			us = append(us, float64(time.Since(start).Nanoseconds())/1e3)
			if err != nil {
				return err
			}
			buf = out
			total += len(out)
			if info.Keyframe {
				keyframes++
				keyBytes += len(out)
			}
			enc := ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE
			if c == framecodec.Zstd {
				enc = ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD
			}
			framed += grpcMessageBytes(&ludusv1.Frame{Tick: snapTicks[i], View: out, Encoding: enc, Keyframe: info.Keyframe,
				BaseTick: info.BaseTick, RawSize: uint32(info.RawSize)})
			got, err := dec.Decode(out)
			if err != nil {
				return fmt.Errorf("%s: snapshot %d does not decode: %w", c, i, err)
			}
			if !bytes.Equal(got, s) {
				return fmt.Errorf("%s: snapshot %d decodes to different bytes", c, i)
			}
		}
		sort.Float64s(us)
		name := "snapshot_bytes_per_sec" // deflate: what browsers get
		prefix := "snapshot_"
		if c == framecodec.Zstd {
			name, prefix = "snapshot_zstd_bytes_per_sec", "snapshot_zstd_"
		}
		res[name] = round(float64(total) / seconds)
		res[prefix+"grpc_bytes_per_sec"] = round(float64(framed) / seconds)
		res[prefix+"keyframes"] = keyframes
		res[prefix+"keyframe_bytes_avg"] = keyBytes / max(keyframes, 1)
		res[prefix+"encode_us_p50"] = math.Round(us[len(us)/2]*100) / 100
	}
	if px, ok := res["deflate_bytes_per_sec"].(int64); ok && px > 0 {
		// The pixel figure of this run, next to it: deflate_bytes_per_sec.
		res["snapshot_vs_pixels"] = math.Round(float64(res["snapshot_bytes_per_sec"].(int64))/float64(px)*10000) / 10000
	}
	return nil
}
