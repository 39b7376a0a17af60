package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/ops/devstack"
	"ludus.dev/ludus/ops/modulewatch"
)

// devKeepBuilds is how many of the watched module's newest builds `ludus
// dev` keeps: every save uploads a build, and the tenant's stored builds are
// bounded (store.DefaultModuleBound), so a long session would reach the
// bound. The few kept let a game started a moment ago, or a rollback, find
// theirs; older ones still in use are kept too (PruneModule).
const devKeepBuilds = 5

// devModules is what dev's uploads need of the backend.
type devModules interface {
	EnsureModule(ctx context.Context, tenantID, name string, wasm []byte) (string, error)
	PruneModule(ctx context.Context, tenantID, name string, keep int) ([]store.Module, []backend.KeptBuild, error)
}

// devUpload returns the watcher's upload: store the build, then delete the
// name's builds older than the newest keep through the backend's safe
// delete path. A failed prune is logged, not the upload's failure: the
// build is stored and playable.
func devUpload(b devModules, tenantID string, keep int, log *slog.Logger) func(ctx context.Context, name string, wasm []byte) (string, error) {
	return func(ctx context.Context, name string, wasm []byte) (string, error) {
		build, err := b.EnsureModule(ctx, tenantID, name, wasm)
		if err != nil {
			return "", err
		}
		deleted, kept, err := b.PruneModule(ctx, tenantID, name, keep)
		if err != nil {
			log.Warn("dev: old builds of the module not deleted", "module", name, "err", err)
		} else if len(deleted)+len(kept) > 0 {
			log.Debug("dev: old builds of the module deleted", "module", name, "deleted", len(deleted), "kept in use", len(kept))
		}
		return build, nil
	}
}

func runDev(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	httpAddr := fs.String("http", "127.0.0.1:8080", "address of the gateway and web UI")
	data := fs.String("data", "ludus-data", "directory for etcd data, the SQLite database and caches")
	nodes := fs.Int("nodes", 2, "number of sim nodes")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:0", "operator listener serving GET /metrics (gateway and sim nodes, labelled by tenant); default a free loopback port, printed at start")
	regions := fs.String("regions", "", `comma-separated regions (e.g. "eu,us"): sim nodes spread over them, one gateway each (the first on --http); default one region, "local"`)
	watch := fs.String("watch", "", "a game module's project directory: rebuild (build.sh, Makefile or go build) and upload it to the demo tenant whenever its sources change")
	watchName := fs.String("watch-name", "", "module name for --watch (default: the directory's name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var watcher *modulewatch.Watcher
	if *watch != "" {
		info, err := os.Stat(*watch)
		if err != nil || !info.IsDir() {
			return fmt.Errorf("--watch %s: not a directory", *watch)
		}
		name := *watchName
		if name == "" {
			name = modulewatch.NameFor(*watch)
		}
		if name == "" {
			return fmt.Errorf("--watch %s: cannot derive a module name from the directory; pass --watch-name", *watch)
		}
		watcher = &modulewatch.Watcher{Dir: *watch, Name: name, Log: logger}
	}
	start := time.Now()
	var regionList []string
	for _, r := range strings.Split(*regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			regionList = append(regionList, r)
		}
	}
	s, err := devstack.Start(ctx, devstack.Config{HTTPAddr: *httpAddr, DataDir: *data, Nodes: *nodes, MetricsAddr: *metricsAddr,
		Regions: regionList, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Printf("\nLudus is running (started in %v):\n  play:     %s\n  health:   %s/healthz\n  metrics:  %s/metrics (operators only: this listener, not the play port)\n  admin:    ludus ctl --url %s --key-file %s nodes\n\nCtrl-C stops everything.\n\n",
		time.Since(start).Round(time.Millisecond), s.GatewayURL, s.GatewayURL, s.MetricsURL, s.GatewayURL, filepath.Join(*data, "operator.key"))
	if len(regionList) > 1 {
		for _, r := range regionList {
			fmt.Printf("  region %-8s gateway %s\n", r, s.RegionURLs[r])
		}
		fmt.Println()
	}
	if watcher != nil {
		watcher.Upload = devUpload(s.Backend, s.TenantID, devKeepBuilds, logger)
		fmt.Printf("Watching %s: module %q is rebuilt and uploaded to tenant %q on every change; play it at %s/?module=%s\n\n", *watch, watcher.Name, devstack.DemoTenant, s.GatewayURL, watcher.Name)
		go watcher.Run(ctx, nil)
	}
	<-ctx.Done()
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(sctx)
	return nil
}
