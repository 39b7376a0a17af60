package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"ludus.dev/ludus/internal/bearer"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

const ctlUsage = `ludus ctl [--url URL] [--key-file PATH] COMMAND

  tenants                      list tenants (operator key)
  tenant create SLUG [NAME]    create a tenant; prints its admin key once (operator key)
  modules                      list the tenant's stored module builds, newest first, and its bound
  module upload NAME FILE      upload a game module (.wasm)
  module delete BUILD [--name NAME]
                               delete a stored build (a build id or its first 8+ hex digits), from
                               NAME only if given; refused while a live game or batch run uses it
  module prune NAME --keep N   delete every build of NAME but the newest N, keeping those in use
  module check FILE [--players N] [--ticks N] [--seed N] [--config JSON] [--checkpoint-every N]
                               check a module's determinism locally, no server needed: views,
                               renders and checkpoint round trips must not change any state hash
  games [--ended]              list the tenant's running games, or its ended games with their results
  nodes                        list sim nodes and their addresses (operator key)
  node drain NODE [--wait]     hand every game off NODE; it exits when empty (operator key)
  node credential NODE         print the --node-credential of sim node NODE, derived from
                               $LUDUS_CLUSTER_TOKEN (no server is asked)
  node enrollment-key          print the --node-enrollment-key that lets sim nodes whose ids are not
                               known in advance derive their own credential (from $LUDUS_CLUSTER_TOKEN)
  game replay GAME [--wasm FILE]
                               re-run an archived game locally from its log (shows a crash's trap and
                               tick); the module comes from the backend unless --wasm gives it
  game logs GAME [-f]          print what a game's module wrote (stdout/stderr) with ticks; -f follows
  game handoff TENANT GAME [NODE]
                               move a running game to NODE or one the fleet picks (operator key);
                               TENANT is the tenant's slug (as "ludus ctl tenants" lists) or id
  game end TENANT GAME [REASON...]
                               end a running game now, as failed with REASON shown to its players
                               (operator key); no result is reported
  usage [--since D] [--tenant SLUG] [--price-per-core-hour USD]
                               metered usage (CPU, player-hours, bytes, etcd writes, archives) and
                               a cost estimate
  batch run|watch|get|cancel|link|rotate-link-key ...
                               batch runs of headless games (run "ludus ctl batch help")

The API key (the operator key, or a tenant's API key) comes from --key-file PATH
(a file holding it, e.g. ludus-data/operator.key; default $LUDUS_KEY_FILE) or the
LUDUS_KEY environment variable. --key KEY works too but is discouraged: every user
of the machine can read a process's arguments (ps, /proc).
--url defaults to $LUDUS_URL or http://127.0.0.1:8080.
`

// maxKeyFileBytes bounds what --key-file reads.
const maxKeyFileBytes = 4 << 10

// ctlKey returns the API key ludus ctl sends: --key-file's, --key's (not
// both), the file named by $LUDUS_KEY_FILE, or $LUDUS_KEY.
func ctlKey(keyFile string, keyFileSet bool, keyFlag string, keyFlagSet bool) (string, error) {
	switch {
	case keyFileSet && keyFlagSet:
		return "", errors.New("give --key-file or --key, not both")
	case keyFlagSet:
		return keyFlag, nil
	}
	if keyFile != "" {
		f, err := os.Open(keyFile)
		if err != nil {
			return "", fmt.Errorf("--key-file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
		if err != nil {
			return "", fmt.Errorf("--key-file: %w", err)
		}
		key := strings.TrimSpace(string(b))
		if len(b) > maxKeyFileBytes || key == "" || strings.ContainsAny(key, "\r\n") {
			return "", fmt.Errorf("--key-file %s must hold one API key on one line", keyFile)
		}
		return key, nil
	}
	return os.Getenv("LUDUS_KEY"), nil
}

func runCtl(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	url := fs.String("url", envOr("LUDUS_URL", "http://127.0.0.1:8080"), "gateway or backend URL")
	keyFile := fs.String("key-file", os.Getenv("LUDUS_KEY_FILE"), "file holding the API key")
	keyFlag := fs.String("key", "", "API key (discouraged: visible in the process list; use --key-file or $LUDUS_KEY)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), ctlUsage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	keyFileSet, keyFlagSet := false, false
	fs.Visit(func(f *flag.Flag) {
		keyFileSet = keyFileSet || f.Name == "key-file"
		keyFlagSet = keyFlagSet || f.Name == "key"
	})
	k, err := ctlKey(*keyFile, keyFileSet, *keyFlag, keyFlagSet)
	if err != nil {
		return err
	}
	if keyFlagSet {
		fmt.Fprintln(os.Stderr, "ludus ctl: --key shows the key to every user of this machine (ps); prefer --key-file PATH or $LUDUS_KEY")
	}
	key := &k
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprint(out, ctlUsage)
		return nil
	}
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, *url,
		connect.WithInterceptors(bearer.Token(*key)), connect.WithSendMaxBytes(33<<20))
	fleetc := ludusv1connect.NewFleetServiceClient(http.DefaultClient, *url, connect.WithInterceptors(bearer.Token(*key)))
	logsc := ludusv1connect.NewGameLogServiceClient(http.DefaultClient, *url, connect.WithInterceptors(bearer.Token(*key)), connect.WithReadMaxBytes(33<<20))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	switch {
	case rest[0] == "tenants":
		resp, err := admin.ListTenants(ctx, connect.NewRequest(&ludusv1.ListTenantsRequest{}))
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "ID\tSLUG\tNAME")
		for _, t := range resp.Msg.Tenants {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Id, t.Slug, t.Name)
		}
	case rest[0] == "tenant" && len(rest) >= 3 && rest[1] == "create":
		name := rest[2]
		if len(rest) > 3 {
			name = rest[3]
		}
		resp, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: rest[2], Name: name}))
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "tenant %s (%s) created\nadmin key (shown once): %s\n", resp.Msg.Tenant.Slug, resp.Msg.Tenant.Id, resp.Msg.AdminKey)
	case rest[0] == "modules":
		return listModules(ctx, admin, out)
	case rest[0] == "module" && len(rest) >= 2 && rest[1] == "delete":
		return deleteModule(ctx, admin, rest[2:], out)
	case rest[0] == "module" && len(rest) >= 2 && rest[1] == "prune":
		return pruneModules(ctx, admin, rest[2:], out)
	case rest[0] == "module" && len(rest) >= 2 && rest[1] == "check":
		return runModuleCheck(ctx, rest[2:], out)
	case rest[0] == "module" && len(rest) == 4 && rest[1] == "upload":
		wasm, err := os.ReadFile(rest[3])
		if err != nil {
			return err
		}
		resp, err := admin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: rest[2], Wasm: wasm}))
		if err != nil {
			return err
		}
		m := resp.Msg.Module
		fmt.Fprintf(tw, "uploaded %s: build %s, %d ticks/s, up to %d players\n", m.Name, m.BuildId, m.TickRate, m.MaxPlayers)
	case rest[0] == "games" && len(rest) == 2 && rest[1] == "--ended":
		tw.Flush()
		return listEndedGames(ctx, admin, out)
	case rest[0] == "games":
		resp, err := admin.ListGames(ctx, connect.NewRequest(&ludusv1.AdminServiceListGamesRequest{}))
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "GAME\tMODULE\tSTATE\tNODE\tPLAYERS\tTICK")
		for _, g := range resp.Msg.Games {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\n", g.GameId, g.ModuleName, g.State, g.NodeId, g.Players, g.MaxPlayers, g.Tick)
		}
	case rest[0] == "batch": // ctl_batch.go
		return batchCmd(ctx, http.DefaultClient, *url, *key, rest[1:], out)
	case rest[0] == "usage": // ctl_usage.go
		return usageCmd(ctx, http.DefaultClient, *url, *key, rest[1:], tw)
	case rest[0] == "nodes":
		resp, err := admin.ListNodes(ctx, connect.NewRequest(&ludusv1.ListNodesRequest{}))
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "NODE\tADDRESS\tREGION\tGAMES\tCAPACITY\tDRAINING")
		for _, n := range resp.Msg.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%v\n", n.Id, n.Address, n.Region, n.Games, n.Capacity, n.Draining)
		}
	case rest[0] == "node" && len(rest) == 3 && rest[1] == "credential":
		tw.Flush()
		return nodeCredential(rest[2], out)
	case rest[0] == "node" && len(rest) == 2 && rest[1] == "enrollment-key":
		tw.Flush()
		return nodeEnrollmentKey(out)
	case rest[0] == "node" && len(rest) >= 3 && rest[1] == "drain":
		resp, err := fleetc.DrainNode(ctx, connect.NewRequest(&ludusv1.DrainNodeRequest{NodeId: rest[2]}))
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "draining %s (%d games)\n", rest[2], resp.Msg.Games)
		if len(rest) > 3 && rest[3] == "--wait" {
			tw.Flush()
			return waitDrained(ctx, admin, rest[2], out)
		}
	case rest[0] == "game" && len(rest) >= 3 && rest[1] == "replay":
		wasm := ""
		if len(rest) == 5 && rest[3] == "--wasm" {
			wasm = rest[4]
		}
		tw.Flush()
		return replayGame(ctx, admin, logsc, rest[2], wasm, out)
	case rest[0] == "game" && len(rest) >= 3 && rest[1] == "logs":
		tw.Flush()
		return gameLogs(ctx, logsc, rest[2:], out)
	case rest[0] == "game" && len(rest) >= 4 && rest[1] == "handoff":
		target := ""
		if len(rest) > 4 {
			target = rest[4]
		}
		tenantID, err := resolveTenant(ctx, admin, rest[2])
		if err != nil {
			return err
		}
		resp, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: tenantID, GameId: rest[3], TargetNodeId: target}))
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "game %s moved from %s to %s\n", rest[3], resp.Msg.FromNodeId, resp.Msg.ToNodeId)
	case rest[0] == "game" && len(rest) >= 4 && rest[1] == "end":
		tenantID, err := resolveTenant(ctx, admin, rest[2])
		if err != nil {
			return err
		}
		resp, err := fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: tenantID, GameId: rest[3], Reason: strings.Join(rest[4:], " ")}))
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "game %s ended on %s at tick %d\n", rest[3], resp.Msg.NodeId, resp.Msg.Tick)
	default:
		return errors.New("unknown ctl command; run \"ludus ctl help\"")
	}
	return nil
}

// waitDrained polls the node list until the node has left the fleet.
func waitDrained(ctx context.Context, admin ludusv1connect.AdminServiceClient, node string, out io.Writer) error {
	for {
		resp, err := admin.ListNodes(ctx, connect.NewRequest(&ludusv1.ListNodesRequest{}))
		if err != nil {
			return err
		}
		present := false
		for _, n := range resp.Msg.Nodes {
			if n.Id == node {
				present = true
				fmt.Fprintf(out, "%s: %d games left\n", node, n.Games)
			}
		}
		if !present {
			fmt.Fprintf(out, "%s drained and left the fleet\n", node)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// replayGame fetches an archived game's log and re-runs it locally, checking
// every recorded state hash; a game that crashed shows the same trap at the
// same tick.
func replayGame(ctx context.Context, admin ludusv1connect.AdminServiceClient, logsc ludusv1connect.GameLogServiceClient, gameID, wasmPath string, out io.Writer) error {
	resp, err := admin.GetGameLog(ctx, connect.NewRequest(&ludusv1.GetGameLogRequest{GameId: gameID}))
	if err != nil {
		return err
	}
	var spec clusterstate.GameSpec
	if err := json.Unmarshal(resp.Msg.SpecJson, &spec); err != nil {
		return fmt.Errorf("archived spec: %w", err)
	}
	var wasm []byte
	if wasmPath != "" {
		if wasm, err = os.ReadFile(wasmPath); err != nil {
			return err
		}
	} else if wasm, err = fetchBuild(ctx, logsc, spec.BuildID); err != nil {
		return err
	}
	if got := engine.BuildID(wasm); got != spec.BuildID {
		return fmt.Errorf("--wasm is build %s; the game ran build %s", got, spec.BuildID)
	}
	var chunks []*inputlog.Chunk
	for i, b := range resp.Msg.Chunks {
		c, err := inputlog.Decode(b)
		if err != nil {
			return fmt.Errorf("archived chunk %d: %w", i, err)
		}
		chunks = append(chunks, c)
	}
	cache, _ := os.UserCacheDir()
	eng, err := engine.New(ctx, engine.Config{CacheDir: filepath.Join(cache, "ludus", "wazero")})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	start := time.Now()
	inst, hashes, err := simnode.Replay(ctx, eng, wasm, spec, chunks)
	fmt.Fprintf(out, "game %s (%s, build %.12s): archived as %s at tick %d", gameID, spec.ModuleName, spec.BuildID, resp.Msg.State, resp.Msg.FinalTick)
	if resp.Msg.Message != "" {
		fmt.Fprintf(out, " (%s)", resp.Msg.Message)
	}
	fmt.Fprintln(out)
	var trap *engine.TrapError
	switch {
	case errors.As(err, &trap):
		fmt.Fprintf(out, "replay: %v\n", trap)
		fmt.Fprintf(out, "replay reproduced the failure at tick %d after checking %d state hashes (%v)\n", trap.Tick, len(hashes), time.Since(start).Round(time.Millisecond))
		return nil
	case err != nil:
		return fmt.Errorf("replay: %w", err)
	}
	defer inst.Close(ctx)
	res, _ := inst.Result(ctx)
	fmt.Fprintf(out, "replay: %d ticks, %d state hashes verified, %v\nresult: %s\n", inst.Tick(), len(hashes), time.Since(start).Round(time.Millisecond), res)
	return nil
}
