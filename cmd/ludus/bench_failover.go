package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/ops/localcluster"
	"ludus.dev/ludus/simnode/engine"
)

func init() {
	var games, nodes int
	var ttl, warmup time.Duration
	registerBench("failover", bench{
		summary: "kill -9 a sim node of a multi-process cluster: takeover time, lost inputs and games",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&games, "games", 30, "games (each with 3 bots and one scripted player)")
			fs.IntVar(&nodes, "nodes", 3, "sim nodes")
			fs.DurationVar(&ttl, "lease-ttl", 2*time.Second, "sim node lease TTL")
			fs.DurationVar(&warmup, "warmup", 3*time.Second, "play before the kill")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
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
			fmt.Fprintf(progress, "starting etcd, backend, gateway and %d sim nodes as processes...\n", nodes)
			c, err := localcluster.Start(ctx, localcluster.Config{Binary: bin, Dir: dir, Nodes: nodes, LeaseTTL: ttl,
				Module: builtin.Arena, WazeroCache: filepath.Join(dir, "wazero")})
			if err != nil {
				return nil, err
			}
			defer c.Close()
			eng, err := engine.New(ctx, engine.Config{CacheDir: filepath.Join(dir, "wazero")})
			if err != nil {
				return nil, err
			}
			defer eng.Close(context.Background())
			fmt.Fprintf(progress, "%d games playing; killing the busiest node after %v...\n", games, warmup)
			res, err := localcluster.RunFailover(ctx, c, eng, builtin.Arena, games, warmup)
			if err != nil {
				return nil, err
			}
			return map[string]any{
				"games": res.Games, "victim_games": res.VictimGames, "lease_ttl_ms": res.LeaseTTLms,
				"takeover_ms_p50": res.TakeoverMsP50, "takeover_ms_p99": res.TakeoverMsP99,
				"acked_inputs": res.AckedInputs, "acked_inputs_lost": res.AckedInputsLost,
				"inputs_applied_twice": res.InputsDoubled, "games_lost": res.GamesLost,
				"state_hashes_checked": res.HashesChecked, "replay_mismatches": res.ReplayMismatch,
				"handoff_pause_ms_p99": res.HandoffPauseMsP99, "handoffs": res.Handoffs,
				"replay_ms_per_min_of_play": res.ReplayMsPerMinOfPlay, "etcd_writes_per_game_sec": res.EtcdWritesPerGameSec,
				"spectator_delay_ms_p99": res.SpectatorDelayMsP99,
			}, nil
		},
	})
}
