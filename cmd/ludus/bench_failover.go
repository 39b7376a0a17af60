package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/internal/localcluster"
	"ludus.dev/ludus/simnode/engine"
)

// parseDelivery reads a -mode flag: "snapshots" or "pixels".
func parseDelivery(mode string) (ludusv1.Delivery, error) {
	switch mode {
	case "snapshots":
		return ludusv1.Delivery_DELIVERY_SNAPSHOTS, nil
	case "pixels":
		return ludusv1.Delivery_DELIVERY_PIXELS, nil
	}
	return 0, fmt.Errorf("-mode %q: want snapshots or pixels", mode)
}

// structFields turns a result struct into the bench's flat JSON object, by
// its json tags (numbers stay exact: json.Number).
func structFields(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	m := map[string]any{}
	return m, dec.Decode(&m)
}

// syncWriter serializes the writes of the processes' log copiers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func init() {
	var games, nodes int
	var ttl, warmup time.Duration
	var mode, logs string
	var unaryRate, playRate float64
	registerBench("failover", bench{
		summary: "kill -9 a sim node of a multi-process cluster: takeover time, lost or unlogged inputs, rollbacks, games lost",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&games, "games", 30, "games (each with 3 bots, a browser-like player on StreamFrames + SendInput and a native player on Play)")
			fs.IntVar(&nodes, "nodes", 3, "sim nodes")
			fs.DurationVar(&ttl, "lease-ttl", 2*time.Second, "sim node lease TTL")
			fs.DurationVar(&warmup, "warmup", 3*time.Second, "play before the handoffs and the kill")
			fs.StringVar(&mode, "mode", "snapshots", "delivery of every stream the bench opens: snapshots or pixels")
			fs.Float64Var(&unaryRate, "unary-rate", 30, "inputs/s of each browser-like player (SendInput, 3 in flight)")
			fs.Float64Var(&playRate, "play-rate", 30, "inputs/s of each native player (Play stream)")
			fs.StringVar(&logs, "logs", "", "append every process's log to this file (default: discarded)")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			delivery, err := parseDelivery(mode)
			if err != nil {
				return nil, err
			}
			bin, err := os.Executable()
			if err != nil {
				return nil, err
			}
			dir, err := os.MkdirTemp("", "ludus-bench-failover")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
			ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			var logw io.Writer
			if logs != "" {
				f, err := os.OpenFile(logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				logw = &syncWriter{w: f}
			}
			fmt.Fprintf(progress, "starting etcd, backend, gateway and %d sim nodes as processes...\n", nodes)
			c, err := localcluster.Start(ctx, localcluster.Config{Binary: bin, Dir: dir, Nodes: nodes, LeaseTTL: ttl,
				Module: builtin.Arena, WazeroCache: filepath.Join(dir, "wazero"), Logs: logw})
			if err != nil {
				return nil, err
			}
			defer c.Close()
			eng, err := engine.New(ctx, engine.Config{CacheDir: filepath.Join(dir, "wazero")})
			if err != nil {
				return nil, err
			}
			defer eng.Close(context.Background())
			fmt.Fprintf(progress, "%d games playing (%s); handing off, then killing the busiest node after %v...\n", games, mode, warmup)
			res, err := localcluster.RunFailoverWith(ctx, c, eng, builtin.Arena, localcluster.FailoverOptions{
				Games: games, Warmup: warmup, Delivery: delivery, UnaryRate: unaryRate, PlayRate: playRate})
			if err != nil {
				return nil, err
			}
			return structFields(res)
		},
	})
}
