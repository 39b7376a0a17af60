package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// defaultPricePerCoreHour is the dedicated-server field report's figure
// (/work/shared/seeds/002_3e0707ce8d102bbb.txt, "Region, Kosten und wo ein
// Relay reicht"): a node of 2 vCPU / 4 GB costs about $0.09 an hour, so $0.045
// per core-hour.
const defaultPricePerCoreHour = 0.045

const ctlUsageHelp = `ludus ctl usage [--since DURATION] [--tenant SLUG] [--price-per-core-hour USD]

Metered usage per tenant (QuotaService.GetUsage): CPU-seconds of simulation,
player-hours, bytes streamed, etcd writes, archived bytes and games ended at
their deadline, summed over the hours since --since (default 24h, at most
2208h = 92 days; whole hours, so the current hour counts from its start).
A tenant's key shows its own tenant; the operator key every tenant, or one
with --tenant.

The cost estimate is the simulation's CPU alone — CPU-hours × the price of a
core-hour — and per player-hour (what one concurrent player costs an hour).
The default price, $0.045 per core-hour, is the dedicated-server field
report's: a 2 vCPU / 4 GB node at about $0.09 an hour (48 players, $0.0019 per
player-hour at full load). Gateways, backend, etcd, bandwidth and idle
capacity are not in it; that report measured its real cost per player-hour at
about three times the full-load figure.
`

// usageCmd is `ludus ctl usage`.
func usageCmd(ctx context.Context, hc connect.HTTPClient, url, key string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, ctlUsageHelp) }
	since := fs.Duration("since", 24*time.Hour, "how far back")
	tenant := fs.String("tenant", "", "one tenant (slug or id); the operator key's default is every tenant")
	price := fs.Float64("price-per-core-hour", defaultPricePerCoreHour, "price of one core for one hour, in USD")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: unexpected %q\n\n%s", fs.Arg(0), ctlUsageHelp)
	}
	if *since <= 0 {
		return fmt.Errorf("--since must be a positive duration (e.g. 24h), got %v", *since)
	}
	if *price < 0 {
		return fmt.Errorf("--price-per-core-hour must not be negative, got %v", *price)
	}
	c := ludusv1connect.NewQuotaServiceClient(hc, url, connect.WithInterceptors(bearer.Token(key)))
	resp, err := c.GetUsage(ctx, connect.NewRequest(&ludusv1.GetUsageRequest{Tenant: *tenant,
		Since: timestamppb.New(time.Now().Add(-*since))}))
	if err != nil {
		return err
	}
	writeUsage(out, resp.Msg.Records, *price)
	return nil
}

// usageTotal is one tenant's usage over the period.
type usageTotal struct {
	slug                                                 string
	cpuSeconds, playerSeconds                            float64
	streamBytes, etcdWrites, archiveBytes, gamesTimedOut int64
	hours                                                int
}

// writeUsage prints a table of usage per tenant with the cost estimate.
func writeUsage(out io.Writer, recs []*ludusv1.UsageRecord, pricePerCoreHour float64) {
	byTenant := map[string]*usageTotal{}
	var ids []string
	for _, r := range recs {
		t := byTenant[r.TenantId]
		if t == nil {
			t = &usageTotal{slug: r.TenantSlug}
			if t.slug == "" {
				t.slug = r.TenantId
			}
			byTenant[r.TenantId] = t
			ids = append(ids, r.TenantId)
		}
		t.cpuSeconds += r.CpuSeconds
		t.playerSeconds += r.PlayerSeconds
		t.streamBytes += r.StreamBytes
		t.etcdWrites += r.EtcdWrites
		t.archiveBytes += r.ArchiveBytes
		t.gamesTimedOut += r.GamesTimedOut
		t.hours++
	}
	sort.Slice(ids, func(i, j int) bool { return byTenant[ids[i]].slug < byTenant[ids[j]].slug })
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "TENANT\tCPU-SECONDS\tPLAYER-HOURS\tSTREAMED\tETCD WRITES\tARCHIVED\tTIMED OUT\tCPU COST (USD)\tUSD/PLAYER-HOUR")
	if len(ids) == 0 {
		tw.Flush()
		fmt.Fprintln(out, "(no usage recorded in this period)")
		return
	}
	for _, id := range ids {
		t := byTenant[id]
		cost := t.cpuSeconds / 3600 * pricePerCoreHour
		perPlayer := "-"
		if ph := t.playerSeconds / 3600; ph > 0 {
			perPlayer = fmt.Sprintf("%.4f", cost/ph)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%s\t%d\t%s\t%d\t%.4f\t%s\n", t.slug, t.cpuSeconds, t.playerSeconds/3600, byteSize(t.streamBytes),
			t.etcdWrites, byteSize(t.archiveBytes), t.gamesTimedOut, cost, perPlayer)
	}
}

// byteSize formats n bytes for people (KiB, MiB, GiB…).
func byteSize(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
