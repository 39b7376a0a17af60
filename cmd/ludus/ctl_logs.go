package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/engine"
)

// gameLogs prints a game's guest log (`ludus ctl game logs GAME [-f]`): one
// line per line the module wrote, with its tick and stream; with follow it
// waits for new lines until the game ends.
func gameLogs(ctx context.Context, c ludusv1connect.GameLogServiceClient, args []string, out io.Writer) error {
	game, follow := "", false
	for _, a := range args {
		switch a {
		case "-f", "--follow":
			follow = true
		default:
			if game != "" || strings.HasPrefix(a, "-") {
				return errors.New("usage: ludus ctl game logs GAME [-f]")
			}
			game = a
		}
	}
	if game == "" {
		return errors.New("usage: ludus ctl game logs GAME [-f]")
	}
	st, err := c.GameLogs(ctx, connect.NewRequest(&ludusv1.GameLogsRequest{GameId: game, Follow: follow}))
	if err != nil {
		return err
	}
	defer st.Close()
	node := ""
	for st.Receive() {
		m := st.Msg()
		if m.NodeId != node && m.NodeId != "" {
			if node != "" {
				fmt.Fprintf(out, "-- the game moved to node %s; its log there starts again --\n", m.NodeId)
			}
			node = m.NodeId
		}
		if m.Skipped > 0 {
			fmt.Fprintf(out, "-- %d lines dropped (the log keeps the newest lines) --\n", m.Skipped)
		}
		for _, l := range m.Lines {
			stream := "out"
			if l.Stderr {
				stream = "err"
			}
			fmt.Fprintf(out, "%s tick %d %s: %s\n", l.Time.AsTime().Format("15:04:05.000"), l.Tick, stream, l.Text)
		}
		if m.State != "" && m.State != "moved" {
			where := ""
			if m.Archived {
				where = " (archived log)"
			}
			if m.Dropped > 0 {
				fmt.Fprintf(out, "-- %d lines were dropped in all --\n", m.Dropped)
			}
			fmt.Fprintf(out, "-- game %s%s: %s --\n", m.State, where, m.Message)
		}
	}
	if err := st.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// fetchBuild downloads the module build a game ran from the backend
// (GameLogService.GetBuild, the tenant's API key), for replays.
func fetchBuild(ctx context.Context, c ludusv1connect.GameLogServiceClient, buildID string) ([]byte, error) {
	resp, err := c.GetBuild(ctx, connect.NewRequest(&ludusv1.GetBuildRequest{BuildId: buildID}))
	if err != nil {
		return nil, fmt.Errorf("fetching build %.12s from the backend (or pass its module with --wasm FILE): %w", buildID, err)
	}
	if got := engine.BuildID(resp.Msg.Wasm); got != buildID {
		return nil, fmt.Errorf("the backend returned build %s for %s", got, buildID)
	}
	return resp.Msg.Wasm, nil
}
