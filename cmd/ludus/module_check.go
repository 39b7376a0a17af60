package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"ludus.dev/ludus/sdk/sdktest"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/engine/enginecheck"
)

const moduleCheckUsage = `ludus ctl module check FILE.wasm [--seed N] [--ticks N] [--players N]
                        [--config JSON] [--checkpoint-every N]

Validates a compiled game module (any language) as an upload would, then plays a
scripted match — random but seeded joins, leaves and one-byte inputs — several
ways in the engine that runs matches: straight through twice, calling ludus_view
for every slot and the spectator every tick (and ludus_render on snapshots), and
with ludus_save/ludus_load round trips into fresh instances. It compares the
state hashes after every tick and fails at the first difference with the likely
causes. Needs no server.
`

// runModuleCheck is `ludus ctl module check`.
func runModuleCheck(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("module check", flag.ContinueOnError)
	fs.SetOutput(out)
	seed := fs.Uint64("seed", 1, "match seed")
	ticks := fs.Int("ticks", 600, "ticks to play (fewer if the match ends)")
	players := fs.Int("players", 0, "players in the script (default: the module's max_players)")
	config := fs.String("config", "", "match config passed to ludus_init (JSON for the samples)")
	every := fs.Int("checkpoint-every", 10, "ticks between checkpoint round trips")
	fs.Usage = func() { fmt.Fprint(fs.Output(), moduleCheckUsage) }
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("module check: one FILE.wasm expected")
	}
	if *ticks < 1 || *ticks > 1_000_000 || *players < 0 || *every < 1 {
		return errors.New("module check: --ticks must be 1..1000000, --players >= 0, --checkpoint-every >= 1")
	}
	wasm, err := os.ReadFile(pos[0])
	if err != nil {
		return err
	}
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		return err
	}
	defer e.Close(context.WithoutCancel(ctx))
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	meta := m.Meta
	snap := "views are drawn by the module"
	if m.HasRenderer {
		snap = "snapshots " + meta.SnapshotFormat + " drawn by ludus_render"
	}
	view := meta.ViewFormat
	if meta.ViewWidth > 0 {
		view = fmt.Sprintf("%s %dx%d", view, meta.ViewWidth, meta.ViewHeight)
	}
	fmt.Fprintf(out, "%s: valid module %s, build %.12s, %d ticks/s, up to %d players, views %s, %s\n",
		pos[0], meta.Name, m.BuildID, meta.TickRate, meta.MaxPlayers, view, snap)
	if *players == 0 || *players > meta.MaxPlayers {
		*players = meta.MaxPlayers
	}
	rep, err := sdktest.Check(enginecheck.Target(ctx, m), sdktest.Options{
		Seed: *seed, Config: []byte(*config), Ticks: *ticks, Players: *players, CheckpointEvery: *every,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	fmt.Fprintf(out, "OK %s\n", rep)
	return nil
}
