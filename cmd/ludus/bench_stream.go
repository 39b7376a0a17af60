package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"ludus.dev/ludus/gateway/framecodec"
	"ludus.dev/ludus/gateway/framecodec/arenatrace"
)

// Flags of the gateway part of the stream bench.
var (
	benchStreamGateway  = true
	benchStreamMax      = 2000
	benchStreamLatency  = 12 * time.Second
	benchStreamFastEach = 50
	benchStreamPlay     = true
	benchStreamMode     = "snapshots"
	benchStreamPlayStep = 4 * time.Second
)

func init() {
	registerBench("stream", bench{
		summary: "frame codec on a scripted 60 s arena trace (bytes/s raw, seed-style delta, deflate, zstd; snapshots every tick vs pixels); gateway added latency, Play input acks and rate, viewer streams per gateway",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&benchStreamGateway, "gateway", benchStreamGateway, "also measure the gateway (in-process dev stack on loopback)")
			fs.IntVar(&benchStreamMax, "streams", benchStreamMax, "viewer streams to open against one gateway")
			fs.DurationVar(&benchStreamLatency, "latency-for", benchStreamLatency, "how long to sample the gateway's added latency")
			fs.IntVar(&benchStreamFastEach, "fast-every", benchStreamFastEach, "one viewer in this many reads as fast as it can; the others read a frame every 2 s")
			fs.BoolVar(&benchStreamPlay, "play", benchStreamPlay, "also measure one Play stream's inputs: ack latency at 30/s and the highest rate with ack p99 <= 500 ms")
			fs.StringVar(&benchStreamMode, "mode", benchStreamMode, "delivery of the Play stream: snapshots or pixels")
			fs.DurationVar(&benchStreamPlayStep, "play-step", benchStreamPlayStep, "how long each Play input rate is held")
		},
		run: runStreamBench,
	})
}

// seedDelta is the seed's scheme, for comparison: the first frame whole, then
// only the changed bytes of each frame, as maximal spans of changed bytes, each
// a u32 offset, a u16 length and the new bytes (no compression).
func seedDelta(prev, cur []byte) int {
	if prev == nil || len(prev) != len(cur) {
		return len(cur)
	}
	size := 0
	for i := 0; i < len(cur); {
		if cur[i] == prev[i] {
			i++
			continue
		}
		j := i
		for j < len(cur) && cur[j] != prev[j] && j-i < math.MaxUint16 {
			j++
		}
		size += 6 + (j - i)
		i = j
	}
	return size
}

func runStreamBench(ctx context.Context, progress io.Writer) (map[string]any, error) {
	fmt.Fprintln(progress, "rendering the 60 s arena trace...")
	ticks, views, err := arenatrace.Frames(arenatrace.Bench)
	if err != nil {
		return nil, err
	}
	seconds := float64(len(views)) / arenatrace.FramesPerSecond
	var full, seed int
	for i, v := range views {
		full += len(v)
		var prev []byte
		if i > 0 {
			prev = views[i-1]
		}
		seed += seedDelta(prev, v)
	}
	res := map[string]any{
		"frames":                   len(views),
		"trace_seconds":            seconds,
		"frame_bytes":              len(views[0]),
		"full_bytes_per_sec":       round(float64(full) / seconds),
		"seed_delta_bytes_per_sec": round(float64(seed) / seconds),
	}
	for _, c := range []framecodec.Compression{framecodec.Deflate, framecodec.Zstd} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "encoding with %s...\n", c)
		enc := framecodec.NewEncoder(framecodec.EncoderOptions{Compression: c, KeyframeTicks: 2 * 35})
		dec := &framecodec.Decoder{}
		var total, keyframes, keyBytes int
		us := make([]float64, 0, len(views))
		buf := make([]byte, 0, 128<<10)
		for i, v := range views {
			start := time.Now()
			out, info, err := enc.Encode(buf[:0], ticks[i], v)
			us = append(us, float64(time.Since(start).Nanoseconds())/1e3)
			if err != nil {
				return nil, err
			}
			buf = out
			total += len(out)
			if info.Keyframe {
				keyframes++
				keyBytes += len(out)
			}
			got, err := dec.Decode(out)
			if err != nil {
				return nil, fmt.Errorf("%s: frame %d does not decode: %w", c, i, err)
			}
			if string(got) != string(v) {
				return nil, fmt.Errorf("%s: frame %d decodes to a different view", c, i)
			}
		}
		sort.Float64s(us)
		name := c.String()
		res[name+"_bytes_per_sec"] = round(float64(total) / seconds)
		res[name+"_ratio_to_seed_delta"] = math.Round(float64(total)/float64(seed)*1000) / 1000
		res[name+"_keyframes"] = keyframes
		res[name+"_keyframe_bytes_avg"] = keyBytes / max(keyframes, 1)
		if c == framecodec.Deflate {
			res["encode_us_per_frame_p50"] = math.Round(us[len(us)/2]*10) / 10
			res["encode_us_per_frame_p99"] = math.Round(us[len(us)*99/100]*10) / 10
			res["encoder_bytes_per_stream"] = enc.MemoryBytes()
		} else {
			res[name+"_encode_us_per_frame_p50"] = math.Round(us[len(us)/2]*10) / 10
		}
	}
	if err := benchSnapshotBytes(ctx, progress, arenatrace.Bench, ticks, views, res); err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	if benchStreamGateway {
		if err := benchGateway(ctx, progress, res); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	return res, nil
}

func round(f float64) int64 { return int64(math.Round(f)) }
