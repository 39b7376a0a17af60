package backend_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// flakyQuotaCluster records ReportUsage calls and answers them with errs in
// turn (nil: OK).
type flakyQuotaCluster struct {
	ludusv1connect.UnimplementedQuotaClusterServiceHandler
	mu   sync.Mutex
	got  []*ludusv1.ReportUsageRequest
	errs []error
}

func (f *flakyQuotaCluster) ReportUsage(_ context.Context, r *connect.Request[ludusv1.ReportUsageRequest]) (*connect.Response[ludusv1.ReportUsageResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, r.Msg)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&ludusv1.ReportUsageResponse{MaxGameDurationS: map[string]int64{"t1": 60}}), nil
}

// TestUsageReporterRetriesSameReport: a report that may have been stored is
// sent again with the same id, alone; usage added meanwhile goes in the next
// report, sent by the same Flush; a report refused for good is dropped.
func TestUsageReporterRetriesSameReport(t *testing.T) {
	f := &flakyQuotaCluster{errs: []error{connect.NewError(connect.CodeUnavailable, errors.New("down")), nil, nil,
		connect.NewError(connect.CodeInvalidArgument, errors.New("bad")), nil}}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewQuotaClusterServiceHandler(f))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := backend.NewUsageReporter(srv.Client(), srv.URL, clusterToken, "gw-1", nil)

	if q, err := r.Flush(ctx); err != nil || q != nil || len(f.got) != 0 {
		t.Fatalf("flush of nothing: %v, %v, %d calls", q, err, len(f.got))
	}
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 5})
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 7, PlayerMillis: -3}) // negative ignored
	if _, err := r.Flush(ctx); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("first flush: %v", err)
	}
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 100})
	q, err := r.Flush(ctx)
	if err != nil || q["t1"] != 60 {
		t.Fatalf("retry: %v, %v", q, err)
	}
	if len(f.got) < 2 || f.got[0].ReportId != f.got[1].ReportId || f.got[1].Usage[0].CpuMicros != 12 || f.got[1].Usage[0].PlayerMillis != 0 ||
		f.got[1].Reporter != "gw-1" {
		t.Fatalf("the retry is not the same report: %v", f.got)
	}
	// The usage added during the outage follows at once, in a report of its
	// own (a last Flush at exit must not leave it behind).
	if len(f.got) != 3 || f.got[2].ReportId == f.got[0].ReportId || f.got[2].Usage[0].CpuMicros != 100 {
		t.Fatalf("usage added during the retry: %v", f.got)
	}
	if _, err := r.Flush(ctx); err != nil || len(f.got) != 3 {
		t.Fatalf("a flush of nothing sent %d reports: %v", len(f.got)-3, err)
	}
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 1})
	if _, err := r.Flush(ctx); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("refused report: %v", err)
	}
	if _, err := r.Flush(ctx); err != nil || len(f.got) != 4 {
		t.Fatalf("a refused report was sent again: %d calls, %v", len(f.got), err)
	}
}

// TestUsageReporterBooksTheHourOfUse: usage held back by an outage is sent
// with the hour it happened in, each hour apart, not all booked in the hour
// the report arrives (where it could push a tenant over its hourly quota
// without the tenant ever having used that much in an hour).
func TestUsageReporterBooksTheHourOfUse(t *testing.T) {
	f := &flakyQuotaCluster{errs: []error{connect.NewError(connect.CodeUnavailable, errors.New("down"))}}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewQuotaClusterServiceHandler(f))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := backend.NewUsageReporter(srv.Client(), srv.URL, clusterToken, "gw-1", nil)
	clock := time.Date(2026, 12, 2, 10, 59, 0, 0, time.UTC)
	backend.SetUsageReporterClock(r, func() time.Time { return clock })
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 5})
	if _, err := r.Flush(ctx); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("first flush: %v", err)
	}
	clock = clock.Add(2 * time.Minute) // 11:01
	r.Add(&ludusv1.UsageDelta{TenantId: "t1", CpuMicros: 7})
	if _, err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	byHour := map[int64]int64{}
	for _, rep := range f.got[1:] {
		for _, d := range rep.Usage {
			byHour[d.HourUnix] += d.CpuMicros
		}
	}
	ten, eleven := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).Unix(), time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC).Unix()
	if len(byHour) != 2 || byHour[ten] != 5 || byHour[eleven] != 7 {
		t.Fatalf("usage by hour %v, want 5 µs at 10:00 and 7 µs at 11:00", byHour)
	}
}
