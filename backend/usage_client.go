package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"

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

	mu      sync.Mutex
	acc     map[string]*ludusv1.UsageDelta // added, not yet in a report
	pending *ludusv1.ReportUsageRequest    // sent, not yet acknowledged
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
		reporter: reporter, log: log, acc: map[string]*ludusv1.UsageDelta{},
	}
}

// Add merges d (a tenant's usage since the last Add) into the next report.
// Negative values are ignored.
func (r *UsageReporter) Add(d *ludusv1.UsageDelta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.acc[d.TenantId]
	if a == nil {
		a = &ludusv1.UsageDelta{TenantId: d.TenantId}
		r.acc[d.TenantId] = a
	}
	a.CpuMicros += max(d.CpuMicros, 0)
	a.PlayerMillis += max(d.PlayerMillis, 0)
	a.StreamBytes += max(d.StreamBytes, 0)
	a.EtcdWrites += max(d.EtcdWrites, 0)
	a.GamesTimedOut += max(d.GamesTimedOut, 0)
}

// Flush sends the report left unacknowledged by an earlier Flush, if any, or
// else everything added since the last report. It returns the backend's
// answer: the max_game_duration_s quotas of the report's tenants. A report
// the backend refuses for good (InvalidArgument, PermissionDenied, …) is
// dropped and logged; one that may be retried stays for the next Flush.
func (r *UsageReporter) Flush(ctx context.Context) (map[string]int64, error) {
	r.mu.Lock()
	if r.pending == nil {
		usage := make([]*ludusv1.UsageDelta, 0, len(r.acc))
		for _, d := range r.acc {
			if d.CpuMicros|d.PlayerMillis|d.StreamBytes|d.EtcdWrites|d.GamesTimedOut != 0 {
				usage = append(usage, d)
			}
			if len(usage) == MaxUsageDeltas {
				break
			}
		}
		for _, d := range usage {
			delete(r.acc, d.TenantId)
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
		return nil, nil
	}
	resp, err := r.client.ReportUsage(ctx, connect.NewRequest(p))
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded,
			connect.CodeAborted, connect.CodeCanceled, connect.CodeResourceExhausted:
			return nil, err // sent again next time
		}
		r.log.Error("usage report refused; its usage is lost", "report", p.ReportId, "tenants", len(p.Usage), "err", err)
	}
	r.mu.Lock()
	if r.pending == p {
		r.pending = nil
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return resp.Msg.MaxGameDurationS, nil
}
