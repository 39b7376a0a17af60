package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Usage metering (issue 14): sim nodes report each tenant's CPU time, etcd
// writes and games ended at their deadline, gateways its player time and
// stream bytes (QuotaClusterService.ReportUsage, about every 10 s); the store
// meters archived bytes itself. Everything is added per tenant and hour.
// Gateways read a tenant's quotas and standing for admission
// (GetTenantQuotas).

// Bounds of a usage report.
const (
	MaxUsageDeltas = 10_000
	// maxUsageValue bounds each metered value of one delta: far beyond what
	// any reporter meters between two reports, small enough that sums of
	// years of reports stay far from overflowing int64.
	maxUsageValue = 1e15
)

// quotaCluster implements ludus.cluster side QuotaClusterService (package
// ludus.v1, quota.proto).
type quotaCluster struct{ *Server }

// GetTenantQuotas returns a tenant's quotas and what admission checks against
// them. Cluster token only (gateways).
func (s *quotaCluster) GetTenantQuotas(ctx context.Context, req *connect.Request[ludusv1.GetTenantQuotasRequest]) (*connect.Response[ludusv1.GetTenantQuotasResponse], error) {
	if _, err := (&moduleStore{s.Server}).cluster(req.Header(), "GetTenantQuotas", clusterOnly); err != nil {
		return nil, err
	}
	if err := checkTenantID(req.Msg.TenantId); err != nil {
		return nil, invalidArg(err)
	}
	t, err := s.store.TenantByID(ctx, req.Msg.TenantId)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown tenant %q", req.Msg.TenantId))
	} else if err != nil {
		return nil, s.internal(ctx, "tenant", err)
	}
	q, err := s.store.Quotas(ctx, t.ID)
	if err != nil {
		return nil, s.internal(ctx, "quotas", err)
	}
	now := s.now().UTC()
	hour := now.Truncate(time.Hour)
	recs, err := s.store.Usage(ctx, t.ID, hour.Add(-time.Hour))
	if err != nil {
		return nil, s.internal(ctx, "usage", err)
	}
	var prev, cur float64
	for _, r := range recs {
		switch {
		case r.Hour.Equal(hour):
			cur = float64(r.CPUMicros) / 1e6
		case r.Hour.Equal(hour.Add(-time.Hour)):
			prev = float64(r.CPUMicros) / 1e6
		}
	}
	archived, err := s.store.ArchiveBytes(ctx, t.ID)
	if err != nil {
		return nil, s.internal(ctx, "archive bytes", err)
	}
	used, below := CPUWindow(prev, cur, now, float64(q.CPUSecondsPerHour))
	out := &ludusv1.GetTenantQuotasResponse{Quotas: quotasProto(q), CpuSecondsLastHour: used, ArchiveBytes: archived, TenantSlug: t.Slug}
	if !below.IsZero() {
		out.CpuBelowQuotaAt = timestamppb.New(below)
	}
	return connect.NewResponse(out), nil
}

// CPUWindow returns the CPU-seconds used in the 60 minutes before now, from
// the usage of the previous hour (prev) and of now's hour (cur): cur plus the
// part of prev still inside the window, in proportion to time (usage is kept
// per hour, not per second). With a limit above 0 that used reaches, it also
// returns when used falls below limit if nothing more is used; otherwise the
// zero time.
func CPUWindow(prev, cur float64, now time.Time, limit float64) (used float64, belowAt time.Time) {
	hour := now.Truncate(time.Hour)
	x := float64(now.Sub(hour)) / float64(time.Hour) // elapsed part of this hour
	used = cur + prev*(1-x)
	if limit <= 0 || used < limit {
		return used, time.Time{}
	}
	if cur < limit {
		// Still this hour, as prev leaves the window: cur + prev*(1-y) < limit.
		y := 1 - (limit-cur)/prev
		return used, hour.Add(time.Duration(math.Ceil(y * float64(time.Hour))))
	}
	// Next hour, as this hour's usage leaves the window: cur*(1-z) < limit.
	z := 1 - limit/cur
	return used, hour.Add(time.Hour + time.Duration(math.Ceil(z*float64(time.Hour))))
}

// checkReportID validates a report id: 1..64 of A-Z, a-z, 0-9, "_" and "-".
func checkReportID(field, id string) error {
	if id == "" || len(id) > 64 || !allBytes(id, func(b byte) bool {
		return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.'
	}) {
		return fmt.Errorf("%s must be 1..64 characters of A-Z, a-z, 0-9, \"_\", \"-\" and \".\", got %q", field, clip(id))
	}
	return nil
}

// checkUsageDelta validates one delta of a report.
func checkUsageDelta(i int, d *ludusv1.UsageDelta) error {
	if d == nil {
		return fmt.Errorf("usage[%d] is empty", i)
	}
	if err := checkTenantID(d.TenantId); err != nil {
		return fmt.Errorf("usage[%d]: %w", i, err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"cpu_micros", d.CpuMicros}, {"player_millis", d.PlayerMillis}, {"stream_bytes", d.StreamBytes},
		{"etcd_writes", d.EtcdWrites}, {"games_timed_out", d.GamesTimedOut}} {
		if f.v < 0 || f.v > maxUsageValue {
			return fmt.Errorf("usage[%d].%s must be 0..%d, got %d", i, f.name, int64(maxUsageValue), f.v)
		}
	}
	return nil
}

// Bounds of a usage delta's hour_unix: how old a report held back by an
// outage may be, and how far a reporter's clock may run ahead.
const (
	maxReportAge = 7 * 24 * time.Hour
	maxUsageSkew = 5 * time.Minute
)

// usageHour is the hour usage[i] is booked in: the one it happened in
// (hourUnix, a whole hour within bounds), or now's for a reporter that does
// not say.
func usageHour(i int, hourUnix int64, now time.Time) (time.Time, error) {
	if hourUnix == 0 {
		return now.Truncate(time.Hour), nil
	}
	hour := time.Unix(hourUnix, 0).UTC()
	switch {
	case hourUnix%3600 != 0:
		return time.Time{}, fmt.Errorf("usage[%d].hour_unix %d is not the start of an hour", i, hourUnix)
	case hour.After(now.Add(maxUsageSkew)):
		return time.Time{}, fmt.Errorf("usage[%d].hour_unix %d (%s) is ahead of the backend's clock (%s): check the reporter's clock", i, hourUnix, hour.Format(time.RFC3339), now.Format(time.RFC3339))
	case hour.Before(now.Add(-maxReportAge).Truncate(time.Hour)):
		return time.Time{}, fmt.Errorf("usage[%d].hour_unix %d (%s) is more than %v old", i, hourUnix, hour.Format(time.RFC3339), maxReportAge)
	}
	return hour, nil
}

// ReportUsage adds a gateway's or sim node's metered usage to the hours it
// happened in (or the current hour, for a reporter that does not say),
// once per report id of the reporter. The cluster token (a gateway,
// which names itself in reporter) or a node credential (the node is the
// reporter).
func (s *quotaCluster) ReportUsage(ctx context.Context, req *connect.Request[ludusv1.ReportUsageRequest]) (*connect.Response[ludusv1.ReportUsageResponse], error) {
	node, err := (&moduleStore{s.Server}).cluster(req.Header(), "ReportUsage", nodesAllowed)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	reporter := "node:" + node
	if node == "" {
		if err := checkReportID("reporter", m.Reporter); err != nil {
			return nil, invalidArg(err)
		}
		reporter = "cluster:" + m.Reporter
	}
	if err := checkReportID("report_id", m.ReportId); err != nil {
		return nil, invalidArg(err)
	}
	if len(m.Usage) > MaxUsageDeltas {
		return nil, invalidArg(fmt.Errorf("at most %d usage deltas in one report, got %d", MaxUsageDeltas, len(m.Usage)))
	}
	now := s.now().UTC()
	recs := make([]store.UsageRecord, 0, len(m.Usage))
	tenants := map[string]bool{}
	for i, d := range m.Usage {
		if err := checkUsageDelta(i, d); err != nil {
			return nil, invalidArg(err)
		}
		hour, err := usageHour(i, d.HourUnix, now)
		if err != nil {
			return nil, invalidArg(err)
		}
		tenants[d.TenantId] = true
		recs = append(recs, store.UsageRecord{TenantID: d.TenantId, Hour: hour, CPUMicros: d.CpuMicros, PlayerMillis: d.PlayerMillis,
			StreamBytes: d.StreamBytes, EtcdWrites: d.EtcdWrites, GamesTimedOut: d.GamesTimedOut})
	}
	applied, err := s.store.AddUsage(ctx, reporter, m.ReportId, now, recs)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalidArg(errors.New("the report names a tenant that does not exist: nothing of it was stored"))
	} else if err != nil {
		return nil, s.internal(ctx, "add usage", err)
	}
	if !applied {
		s.log.DebugContext(ctx, "backend: usage report seen before", "reporter", reporter, "report", m.ReportId)
	}
	out := &ludusv1.ReportUsageResponse{}
	for t := range tenants {
		q, err := s.store.Quotas(ctx, t)
		if err != nil {
			return nil, s.internal(ctx, "quotas", err)
		}
		if q.MaxGameDurationS > 0 {
			if out.MaxGameDurationS == nil {
				out.MaxGameDurationS = map[string]int64{}
			}
			out.MaxGameDurationS[t] = q.MaxGameDurationS
		}
	}
	return connect.NewResponse(out), nil
}
