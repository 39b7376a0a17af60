package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"ludus.dev/ludus/ops/devstack"
)

func runDev(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	httpAddr := fs.String("http", "127.0.0.1:8080", "address of the gateway and web UI")
	data := fs.String("data", "ludus-data", "directory for etcd data, the SQLite database and caches")
	nodes := fs.Int("nodes", 2, "number of sim nodes")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:0", "operator listener serving GET /metrics (gateway and sim nodes, labelled by tenant); default a free loopback port, printed at start")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	s, err := devstack.Start(ctx, devstack.Config{HTTPAddr: *httpAddr, DataDir: *data, Nodes: *nodes, MetricsAddr: *metricsAddr, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Printf("\nLudus is running (started in %v):\n  play:     %s\n  health:   %s/healthz\n  metrics:  %s/metrics (operators only: this listener, not the play port)\n  admin:    ludus ctl --url %s --key-file %s nodes\n\nCtrl-C stops everything.\n\n",
		time.Since(start).Round(time.Millisecond), s.GatewayURL, s.GatewayURL, s.MetricsURL, s.GatewayURL, filepath.Join(*data, "operator.key"))
	<-ctx.Done()
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(sctx)
	return nil
}
