// Command ludus is the one Ludus binary; each role is a subcommand:
//
//	ludus dev                        everything on one machine (embedded etcd, SQLite,
//	                                 backend, gateway, two sim nodes, web UI)
//	ludus backend|gateway|simnode    one role, pointed at a real etcd
//	ludus ctl ...                    admin client over the admin RPC
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"ludus.dev/ludus/internal/gcpolicy"
)

const usage = `ludus — a backend for authoritative multiplayer games

usage:
  ludus dev      [--http 127.0.0.1:8080] [--data ./ludus-data] [--nodes 2] [--watch DIR]
  ludus new      NAME [--lang go|c] [--dir DIR]         write a working game module project
  ludus backend  --etcd URLS --listen ADDR --data DIR
  ludus gateway  --etcd URLS --listen ADDR --backend URL [--metrics-addr ADDR]
  ludus simnode  --etcd URLS --listen ADDR --advertise URL --backend URL --id ID
  ludus etcd     [--data DIR] [--client-port 2379] ...  an embedded etcd member as a process
  ludus ctl      [--url URL] [--key-file PATH] COMMAND ...   (run "ludus ctl help"; or LUDUS_KEY)
  ludus bench    NAME [-json]                          (run "ludus bench help")

Secrets come from the environment: LUDUS_CLUSTER_TOKEN (every role) and
LUDUS_OPERATOR_KEY (backend); the --cluster-token and --operator-key flags also
work, but argv is visible to every user of the machine (ps).
Every role logs JSON lines to stderr.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[2:]
	serverGC(os.Args[1], logger)
	var err error
	switch os.Args[1] {
	case "dev":
		err = runDev(ctx, args, logger)
	case "backend":
		err = runBackend(ctx, args, logger)
	case "gateway":
		err = runGateway(ctx, args, logger)
	case "simnode":
		err = runSimnode(ctx, args, logger)
	case "ctl":
		err = runCtl(ctx, args, os.Stdout)
	case "etcd":
		err = runEtcd(ctx, args, logger)
	case "bench":
		err = runBench(ctx, args, os.Stdout)
	case "new":
		err = runNew(args, os.Stdout)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "ludus: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ludus %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// serverGC applies the servers' garbage collector policy (internal/gcpolicy)
// for the commands that run etcd or matchmaker replicas (gateways), and
// reports whether it did. Sim nodes keep Go's defaults: their heap is mostly
// the modules' memories, which a higher GOGC would multiply. The backend
// does too: its logins wait on the database, and measured no faster.
func serverGC(command string, logger *slog.Logger) bool {
	switch command {
	case "dev", "gateway", "etcd":
		gcpolicy.ForServer(logger)
		return true
	}
	return false
}
