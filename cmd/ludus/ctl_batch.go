package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/batch"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

const batchUsage = `ludus ctl batch COMMAND

  run --module NAME --games N --budget CPU [--seeds LIST] [--config JSON | --map NAME=JSON ...]
      [--sides N] [--game-ticks N] [--deadline D] [--keep-logs] [--chart FILE.png]
                        start a run of headless bot games, show its progress, then the
                        wins per side and per map with 95% Wilson intervals (and a chart)
  watch RUN [--chart FILE.png]
                        follow a run already started, then summarize it
  get RUN               show a run's progress and summary
  cancel RUN            end a run now (results so far are kept)
  link RUN [--ttl D]    print an expiring link to the run's archive (results, logs if
                        kept; default 12h), usable without credentials
  rotate-link-key       revoke every archive link of the tenant

--seeds takes numbers and ranges: 1,2,10-20. --budget is CPU time (e.g. 30m); the run
ends when it is spent, and admission checks it against the tenant's spend cap.
`

// batchCmd runs "ludus ctl batch ...".
func batchCmd(ctx context.Context, hc *http.Client, url, key string, args []string, out io.Writer) error {
	cli := ludusv1connect.NewBatchServiceClient(hc, url, connect.WithInterceptors(bearer.Token(key)), connect.WithReadMaxBytes(64<<20))
	if len(args) == 0 || args[0] == "help" {
		fmt.Fprint(out, batchUsage)
		return nil
	}
	fs := flag.NewFlagSet("batch "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), batchUsage) }
	chart := fs.String("chart", "", "write a PNG bar chart of the win rates here")
	switch args[0] {
	case "run":
		module := fs.String("module", "", "module name")
		build := fs.String("build", "", "module build id (default: the newest build of --module)")
		games := fs.Int("games", 0, "number of games")
		seeds := fs.String("seeds", "", "seeds: 1,2,10-20 (default: derived from the game number)")
		config := fs.String("config", "", "the module's config (JSON), one map")
		var maps mapFlags
		fs.Var(&maps, "map", "NAME=JSON: a named config; repeat for several maps")
		sides := fs.Int("sides", 1, "sides each map and seed is played from")
		gameTicks := fs.Int64("game-ticks", 0, "per-game deadline in ticks (default 600 game seconds)")
		deadline := fs.Duration("deadline", time.Hour, "run deadline (wall clock)")
		budget := fs.Duration("budget", 0, "CPU budget, e.g. 30m")
		keepLogs := fs.Bool("keep-logs", false, "keep each game's input log in the archive")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		spec := &ludusv1.BatchRunSpec{Module: *module, BuildId: *build, Games: int32(min(max(*games, -1), 1<<30)), Sides: int32(*sides),
			GameDeadlineTicks: *gameTicks, DeadlineS: int64(deadline.Seconds()), BudgetCpuS: budget.Seconds(), KeepLogs: *keepLogs}
		if *games > 1<<30 {
			spec.Games = 1 << 30 // refused by the server with its limit
		}
		var err error
		if spec.Seeds, err = parseSeeds(*seeds); err != nil {
			return err
		}
		if *config != "" && len(maps) > 0 {
			return errors.New("give --config or --map, not both")
		}
		if *config != "" {
			maps = append(maps, &ludusv1.BatchMap{ConfigJson: *config})
		}
		spec.Maps = maps
		resp, err := cli.StartRun(ctx, connect.NewRequest(&ludusv1.StartRunRequest{Spec: spec}))
		if err != nil {
			return err
		}
		p := resp.Msg.Progress
		fmt.Fprintf(os.Stderr, "run %s: %d games of %s (build %.12s), deadline %s, budget %.0f CPU-s\n",
			p.RunId, p.Games, *module, p.Spec.GetBuildId(), p.Deadline.AsTime().Local().Format(time.TimeOnly), p.BudgetCpuS)
		return watchBatch(ctx, cli, p.RunId, *chart, out)
	case "watch", "get", "cancel", "link":
		ttl := fs.Duration("ttl", 0, "link validity (default 12h)")
		if len(args) < 2 {
			return fmt.Errorf("usage: ludus ctl batch %s RUN", args[0])
		}
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		run := args[1]
		switch args[0] {
		case "watch":
			return watchBatch(ctx, cli, run, *chart, out)
		case "get":
			progress, results, err := getRunResults(ctx, cli, run)
			if err != nil {
				return err
			}
			printProgressLine(out, progress)
			return summarizeBatch(out, results, *chart)
		case "cancel":
			resp, err := cli.CancelRun(ctx, connect.NewRequest(&ludusv1.CancelRunRequest{RunId: run}))
			if err != nil {
				return err
			}
			printProgressLine(out, resp.Msg.Progress)
			return nil
		default:
			resp, err := cli.RunArchiveLink(ctx, connect.NewRequest(&ludusv1.RunArchiveLinkRequest{RunId: run, TtlS: int64(ttl.Seconds())}))
			if err != nil {
				return err
			}
			u := resp.Msg.Url
			if strings.HasPrefix(u, "/") {
				u = strings.TrimSuffix(url, "/") + u
			}
			fmt.Fprintf(out, "%s\n(expires %s)\n", u, resp.Msg.ExpiresAt.AsTime().Local().Format(time.RFC3339))
			return nil
		}
	case "rotate-link-key":
		if _, err := cli.RotateArchiveLinkKey(ctx, connect.NewRequest(&ludusv1.RotateArchiveLinkKeyRequest{})); err != nil {
			return err
		}
		fmt.Fprintln(out, "archive link key rotated: every link signed before no longer works")
		return nil
	}
	return fmt.Errorf("unknown batch command %q\n%s", args[0], batchUsage)
}

type mapFlags []*ludusv1.BatchMap

func (m *mapFlags) String() string { return fmt.Sprint(len(*m), " maps") }
func (m *mapFlags) Set(v string) error {
	name, cfg, ok := strings.Cut(v, "=")
	if !ok {
		return errors.New("--map wants NAME=JSON")
	}
	*m = append(*m, &ludusv1.BatchMap{Name: name, ConfigJson: cfg})
	return nil
}

// parseSeeds parses "1,2,10-20".
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a number or a range", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("--seeds: %q is not a range", part)
			}
		}
		if b-a >= batch.MaxSeeds || len(out)+int(b-a+1) > batch.MaxSeeds {
			return nil, fmt.Errorf("--seeds: more than %d seeds", batch.MaxSeeds)
		}
		for v := a; ; v++ {
			out = append(out, v)
			if v == b {
				break
			}
		}
	}
	return out, nil
}

// getRunResults reads a run's progress and every result, a page at a time.
// Results are kept without their JSON: the summary needs only their fields,
// and a run holds up to 100,000 results of up to 1 MiB.
func getRunResults(ctx context.Context, cli ludusv1connect.BatchServiceClient, run string) (*ludusv1.BatchProgress, []*ludusv1.BatchResult, error) {
	var results []*ludusv1.BatchResult
	token := ""
	for {
		resp, err := cli.GetRun(ctx, connect.NewRequest(&ludusv1.GetRunRequest{RunId: run, Results: true, PageToken: token}))
		if err != nil {
			return nil, nil, err
		}
		for _, r := range resp.Msg.Results {
			r.ResultJson = ""
			results = append(results, r)
		}
		if token = resp.Msg.NextPageToken; token == "" {
			return resp.Msg.Progress, results, nil
		}
	}
}

// watchBatch follows a run with a progress bar on stderr, then prints its
// summary.
func watchBatch(ctx context.Context, cli ludusv1connect.BatchServiceClient, run, chart string, out io.Writer) error {
	stream, err := cli.WatchRun(ctx, connect.NewRequest(&ludusv1.WatchRunRequest{RunId: run}))
	if err != nil {
		return err
	}
	var results []*ludusv1.BatchResult
	var last *ludusv1.BatchProgress
	for stream.Receive() {
		last = stream.Msg().Progress
		for _, r := range stream.Msg().Results {
			r.ResultJson = "" // the summary needs only the fields
			results = append(results, r)
		}
		fmt.Fprint(os.Stderr, "\r"+progressBar(last))
	}
	fmt.Fprintln(os.Stderr)
	if err := stream.Err(); err != nil {
		return err
	}
	printProgressLine(out, last)
	return summarizeBatch(out, results, chart)
}

// progressBar is one line: bar, games done/total, rate, ETA.
func progressBar(p *ludusv1.BatchProgress) string {
	const width = 30
	frac := 0.0
	if p.Games > 0 {
		frac = float64(p.Done) / float64(p.Games)
	}
	filled := int(frac * width)
	rate := 0.0
	wall := time.Since(p.CreatedAt.AsTime())
	if wall > 0 {
		rate = float64(p.Done) / wall.Seconds()
	}
	eta := "?"
	if rate > 0 {
		eta = (time.Duration(float64(p.Games-p.Done)/rate) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("[%s%s] %d/%d games  %.1f games/s  %.0f× real time  ETA %s   ",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.Done, p.Games, rate, p.Speedup, eta)
}

func printProgressLine(out io.Writer, p *ludusv1.BatchProgress) {
	fmt.Fprintf(out, "run %s: %s", p.RunId, p.State)
	if p.Reason != "" {
		fmt.Fprintf(out, " (%s)", p.Reason)
	}
	fmt.Fprintf(out, ", %d/%d games (%d failed, %d timed out), %.1f of %.0f CPU-s, %.0f× real time\n",
		p.Done, p.Games, p.Failed, p.TimedOut, p.CpuS, p.BudgetCpuS, p.Speedup)
}

// summarizeBatch prints wins per side and per map with 95% Wilson score
// intervals, and writes the chart if asked.
func summarizeBatch(out io.Writer, results []*ludusv1.BatchResult, chart string) error {
	rs := make([]batch.Result, 0, len(results))
	for _, r := range results {
		rs = append(rs, batch.Result{Game: batch.Game{N: int(r.Game), Seed: r.Seed, Side: int(r.Side)}, MapName: r.Map,
			Winner: int(r.Winner), Ticks: r.Ticks, Ended: r.Ended, TimedOut: r.TimedOut, Error: r.Error})
	}
	s := batch.Summarize(rs)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	row := func(w batch.WinRate) {
		side := fmt.Sprint(w.Side)
		if w.Side < 0 {
			side = "none"
		}
		m := w.Map
		if m == "" {
			m = "all"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f%%\t%.1f%% – %.1f%%\t\n", m, side, w.Wins, w.Games, 100*w.Rate, 100*w.Lo, 100*w.Hi)
	}
	fmt.Fprintln(tw, "MAP\tSIDE\tWINS\tGAMES\tWIN RATE\t95% CI (Wilson)\t")
	for _, w := range s.BySide {
		row(w)
	}
	for _, w := range s.ByMap {
		row(w)
	}
	tw.Flush()
	fmt.Fprintf(out, "%d games, %d failed, %d timed out. Side = the winning slot; \"none\" = no winner.\n", s.Games, s.Failed, s.TimedOut)
	if chart != "" {
		f, err := os.Create(chart)
		if err != nil {
			return err
		}
		rates := s.BySide
		if len(s.ByMap) > 0 {
			rates = s.ByMap
		}
		if err := batch.Chart(f, "WIN RATE BY SIDE", rates); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "chart: %s\n", chart)
	}
	return nil
}
