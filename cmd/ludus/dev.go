package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"ludus.dev/ludus/ops/devstack"
)

func runDev(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	httpAddr := fs.String("http", "127.0.0.1:8080", "address of the gateway and web UI")
	data := fs.String("data", "ludus-data", "directory for etcd data, the SQLite database and caches")
	nodes := fs.Int("nodes", 2, "number of sim nodes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	s, err := devstack.Start(ctx, devstack.Config{HTTPAddr: *httpAddr, DataDir: *data, Nodes: *nodes, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Printf("\nLudus is running (started in %v):\n  play:     %s\n  health:   %s/healthz\n  admin:    ludus ctl --url %s --key %s nodes\n\nCtrl-C stops everything.\n\n",
		time.Since(start).Round(time.Millisecond), s.GatewayURL, s.GatewayURL, s.GatewayURL, s.OperatorKey)
	<-ctx.Done()
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(sctx)
	return nil
}
