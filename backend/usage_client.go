package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// UsageReporter collects a gateway's or sim node's metered usage and sends it
// to the backend (QuotaClusterService.ReportUsage). Add merges usage per
// tenant; Flush sends what was added since the last report. A report the
// backend may or may not have stored (a transport error, Unavailable) is sent
// again as it was, with the same report id, before anything newer: the
// backend adds each report once, so usage is counted once however often a
// report is retried. Safe for concurrent use.
type UsageReporter struct {
	client   ludusv1connect.QuotaClusterServiceClient
	reporter string
	log      *slog.Logger

	now     func() time.Time // the clock that says which hour usage happened in
	mu      sync.Mutex
	acc     map[usageKey]*ludusv1.UsageDelta // added, not yet in a report
	pending *ludusv1.ReportUsageRequest      // sent, not yet acknowledged
}

// usageKey is a tenant's usage in one hour (unix seconds of its start).
type usageKey struct {
	tenant string
	hour   int64
}

// NewUsageReporter returns a reporter calling the backend at baseURL with
// credential: a sim node's own credential (auth/clustercred) or, for a
// gateway, the cluster token. reporter names a gateway (1..64 of A-Z, a-z,
// 0-9, "_", "-", "."); the backend ignores it for a node credential.
func NewUsageReporter(hc connect.HTTPClient, baseURL, credential, reporter string, log *slog.Logger) *UsageReporter {
	if log == nil {
		log = slog.Default()
	}
	return &UsageReporter{
		client:   ludusv1connect.NewQuotaClusterServiceClient(hc, baseURL, connect.WithInterceptors(bearer.Token(credential))),
		reporter: reporter, log: log, acc: map[usageKey]*ludusv1.UsageDelta{}, now: time.Now,
	}
}

// Add merges d (a tenant's usage since the last Add) into the next report,
// in the hour it is added in: a report held back by an outage is booked in
// the hours its usage happened (UsageDelta.hour_unix). Negative values are
// ignored.
func (r *UsageReporter) Add(d *ludusv1.UsageDelta) {
	hour := r.now().UTC().Truncate(time.Hour).Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := usageKey{d.TenantId, hour}
	a := r.acc[k]
	if a == nil {
		a = &ludusv1.UsageDelta{TenantId: d.TenantId, HourUnix: hour}
		r.acc[k] = a
	}
	a.CpuMicros += max(d.CpuMicros, 0)
	a.PlayerMillis += max(d.PlayerMillis, 0)
	a.StreamBytes += max(d.StreamBytes, 0)
	a.EtcdWrites += max(d.EtcdWrites, 0)
	a.GamesTimedOut += max(d.GamesTimedOut, 0)
}

// Flush sends the report left unacknowledged by an earlier Flush, if any,
// then everything added since (up to maxFlushReports reports of
// MaxUsageDeltas, so that a last Flush at exit sends the newest usage too,
// not only the older report an outage held back). It returns the backend's
// answers: the max_game_duration_s quotas of the reports' tenants. A report
// the backend refuses for good (InvalidArgument, PermissionDenied, …) is
// dropped and logged; one that may be retried stays for the next Flush.
func (r *UsageReporter) Flush(ctx context.Context) (map[string]int64, error) {
	var quotas map[string]int64
	for range maxFlushReports {
		q, more, err := r.flushOne(ctx)
		if err != nil {
			return quotas, err
		}
		if quotas == nil {
			quotas = q
		} else {
			maps.Copy(quotas, q)
		}
		if !more {
			break
		}
	}
	return quotas, nil
}

// maxFlushReports bounds the reports one Flush sends.
const maxFlushReports = 4

// flushOne sends one report (the pending one, or a new one of what was
// added); more reports whether usage is left to send.
func (r *UsageReporter) flushOne(ctx context.Context) (quotas map[string]int64, more bool, err error) {
	r.mu.Lock()
	if r.pending == nil {
		usage := make([]*ludusv1.UsageDelta, 0, min(len(r.acc), MaxUsageDeltas))
		for k, d := range r.acc {
			if len(usage) == MaxUsageDeltas {
				break
			}
			delete(r.acc, k)
			if d.CpuMicros|d.PlayerMillis|d.StreamBytes|d.EtcdWrites|d.GamesTimedOut != 0 {
				usage = append(usage, d)
			}
		}
		if len(usage) > 0 {
			var id [16]byte
			rand.Read(id[:])
			r.pending = &ludusv1.ReportUsageRequest{ReportId: hex.EncodeToString(id[:]), Reporter: r.reporter, Usage: usage}
		}
	}
	p := r.pending
	r.mu.Unlock()
	if p == nil {
		return nil, false, nil
	}
	resp, err := r.client.ReportUsage(ctx, connect.NewRequest(p))
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded,
			connect.CodeAborted, connect.CodeCanceled, connect.CodeResourceExhausted:
			return nil, false, err // sent again next time
		}
		r.log.Error("usage report refused; its usage is lost", "report", p.ReportId, "tenants", len(p.Usage), "err", err)
	}
	r.mu.Lock()
	if r.pending == p {
		r.pending = nil
	}
	more = len(r.acc) > 0
	r.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	return resp.Msg.MaxGameDurationS, more, nil
}
