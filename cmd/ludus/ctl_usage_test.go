package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

type fakeQuotaService struct {
	ludusv1connect.UnimplementedQuotaServiceHandler
	got *ludusv1.GetUsageRequest
}

func (f *fakeQuotaService) GetUsage(_ context.Context, r *connect.Request[ludusv1.GetUsageRequest]) (*connect.Response[ludusv1.GetUsageResponse], error) {
	f.got = r.Msg
	return connect.NewResponse(&ludusv1.GetUsageResponse{Records: []*ludusv1.UsageRecord{
		{TenantId: "t_b", TenantSlug: "beta", CpuSeconds: 3600, PlayerSeconds: 48 * 3600, StreamBytes: 3 << 20},
		{TenantId: "t_a", TenantSlug: "alpha", CpuSeconds: 1800, EtcdWrites: 9, GamesTimedOut: 2},
		{TenantId: "t_b", TenantSlug: "beta", CpuSeconds: 3600, PlayerSeconds: 48 * 3600},
	}}), nil
}

func TestCtlUsage(t *testing.T) {
	f := &fakeQuotaService{}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewQuotaServiceHandler(f))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out strings.Builder
	if err := usageCmd(context.Background(), srv.Client(), srv.URL, "k", []string{"--since", "2h", "--tenant", "beta"}, &out); err != nil {
		t.Fatal(err)
	}
	if f.got.Tenant != "beta" || time.Since(f.got.Since.AsTime()) < 2*time.Hour || time.Since(f.got.Since.AsTime()) > 2*time.Hour+time.Minute {
		t.Fatalf("request = %v", f.got)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// beta: 2 core-hours at $0.045 = $0.09 for 96 player-hours.
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "alpha") || !strings.Contains(lines[2], "0.0900") ||
		!strings.Contains(lines[2], "96.00") || !strings.Contains(lines[2], "0.0009") || !strings.Contains(lines[2], "3.0 MiB") {
		t.Fatalf("table:\n%s", out.String())
	}
	out.Reset()
	if err := usageCmd(context.Background(), srv.Client(), srv.URL, "k", []string{"--price-per-core-hour", "1"}, &out); err != nil ||
		!strings.Contains(out.String(), "2.0000") {
		t.Fatalf("with $1 a core-hour: %v\n%s", err, out.String())
	}
	for _, bad := range [][]string{{"--since", "-1h"}, {"--price-per-core-hour", "-1"}, {"extra"}, {"--since", "soon"}} {
		if err := usageCmd(context.Background(), srv.Client(), srv.URL, "k", bad, &out); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
