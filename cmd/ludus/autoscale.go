package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/ops/autoscale"
)

// autoscaleFlags configure the Agones FleetAutoscaler webhook a gateway serves
// on its operator listener (POST /autoscale), and the ludus_free_sessions gauge.
type autoscaleFlags struct {
	perNode, upBelow, drainAbove *int
	minReplicas, maxReplicas     *int
	fleets                       *string
}

func addAutoscaleFlags(fs *flag.FlagSet) autoscaleFlags {
	return autoscaleFlags{
		perNode:     fs.Int("autoscale-sessions-per-node", 64, "autoscale webhook: the capacity of one sim node (its --capacity)"),
		upBelow:     fs.Int("autoscale-scale-up-below", 16, "autoscale webhook: fewer free sessions than this in a region adds nodes"),
		drainAbove:  fs.Int("autoscale-drain-above", 128, "autoscale webhook: more free sessions than this, by a whole node's room, drains nodes"),
		minReplicas: fs.Int("autoscale-min", 1, "autoscale webhook: fewest sim nodes per region"),
		maxReplicas: fs.Int("autoscale-max", 100, "autoscale webhook: most sim nodes per region"),
		fleets:      fs.String("autoscale-fleets", os.Getenv("LUDUS_AUTOSCALE_FLEETS"), `autoscale webhook: comma-separated FLEET=REGION pairs naming the region of each Agones fleet (a request's ?region= wins)`),
	}
}

// freeSessionsSource reads the fleet's node records (nodes: the gateway's
// watched directory, Gateway.Nodes) for the webhook and gauge.
func freeSessionsSource(nodes func(context.Context) ([]clusterstate.NodeInfo, error)) autoscale.Source {
	return func(ctx context.Context) (map[string]autoscale.Free, error) {
		nodes, err := nodes(ctx)
		if err != nil {
			return nil, err
		}
		loads := make([]autoscale.Load, len(nodes))
		for i, n := range nodes {
			loads[i] = autoscale.Load{Node: n.ID, Region: n.Region, Capacity: n.Capacity, Games: n.Games, Draining: n.Draining}
		}
		return autoscale.FreeSessions(loads), nil
	}
}

// operatorHandler adds the autoscale webhook to a role's operator handler and
// registers the free-sessions gauge in reg.
func (f autoscaleFlags) operatorHandler(base http.Handler, reg *prometheus.Registry, src autoscale.Source, logger *slog.Logger) (http.Handler, error) {
	fleets := map[string]string{}
	for _, pair := range strings.Split(*f.fleets, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		fleet, region, ok := strings.Cut(pair, "=")
		if !ok || fleet == "" || region == "" {
			return nil, fmt.Errorf("--autoscale-fleets: %q is not FLEET=REGION", pair)
		}
		fleets[fleet] = region
	}
	// Replica counts are int32 in Agones' API: a larger flag must be
	// refused, not wrapped around into a small or negative bound.
	for name, v := range map[string]int{"--autoscale-min": *f.minReplicas, "--autoscale-max": *f.maxReplicas} {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("%s %d: want 0 to %d sim nodes", name, v, math.MaxInt32)
		}
	}
	wh, err := autoscale.NewWebhook(autoscale.Config{
		Policy: autoscale.Policy{SessionsPerNode: *f.perNode, ScaleUpBelow: *f.upBelow, DrainAbove: *f.drainAbove,
			MinReplicas: int32(*f.minReplicas), MaxReplicas: int32(*f.maxReplicas)},
		Source: src, Fleets: fleets, Logger: logger.With("component", "autoscale"),
	})
	if err != nil {
		return nil, fmt.Errorf("autoscale flags: %w", err)
	}
	if reg != nil {
		reg.MustRegister(autoscale.NewCollector(src, 0))
	}
	mux := http.NewServeMux()
	mux.Handle("/", base)
	mux.Handle("/autoscale", wh) // every method: the webhook answers 405 itself
	return mux, nil
}
