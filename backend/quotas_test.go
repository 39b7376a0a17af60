package backend_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// TestQuotasAPI: the operator sets a tenant's quotas (by slug or id); the
// tenant reads its own and nobody else's; bad values are refused whole.
func TestQuotasAPI(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("demo")
	_, otherAdmin := e.createTenant("other")
	qs := ludusv1connect.NewQuotaServiceClient(e.http.Client(), e.http.URL)
	want := &ludusv1.Quotas{LiveGames: 20, GamesPerMinute: 5, CpuSecondsPerHour: 3600, ArchiveBytes: 1 << 30, MaxGameDurationS: 900}

	_, err := qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "demo", Quotas: want}, admin))
	wantCode(t, err, connect.CodePermissionDenied, "SetQuotas needs the operator key")
	_, err = qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "demo", Quotas: want}, ""))
	wantCode(t, err, connect.CodeUnauthenticated)
	for _, bad := range []struct {
		q    *ludusv1.Quotas
		want string
	}{
		{nil, "quotas is required"},
		{&ludusv1.Quotas{LiveGames: -1}, "quotas.live_games"},
		{&ludusv1.Quotas{GamesPerMinute: backend.MaxQuotaGamesPerMinute + 1}, "quotas.games_per_minute"},
		{&ludusv1.Quotas{CpuSecondsPerHour: -5}, "quotas.cpu_seconds_per_hour"},
		{&ludusv1.Quotas{ArchiveBytes: backend.MaxQuotaArchiveBytes + 1}, "quotas.archive_bytes"},
		{&ludusv1.Quotas{MaxGameDurationS: backend.MaxQuotaGameDurationS + 1}, "quotas.max_game_duration_s"},
	} {
		_, err := qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "demo", Quotas: bad.q}, operatorKey))
		wantCode(t, err, connect.CodeInvalidArgument, bad.want)
	}
	_, err = qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "nobody", Quotas: want}, operatorKey))
	wantCode(t, err, connect.CodeNotFound, `"nobody"`)
	got, err := qs.GetQuotas(ctx, req(&ludusv1.GetQuotasRequest{}, admin))
	if err != nil || got.Msg.Quotas.LiveGames != 0 || got.Msg.UpdatedAt != nil {
		t.Fatalf("quotas before any were set (refused attempts store nothing): %v, %v", got, err)
	}

	if _, err := qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "demo", Quotas: want}, operatorKey)); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{admin, operatorKey} {
		ref := ""
		if key == operatorKey {
			ref = tn.Id // by id too
		}
		got, err := qs.GetQuotas(ctx, req(&ludusv1.GetQuotasRequest{Tenant: ref}, key))
		if err != nil || got.Msg.TenantId != tn.Id || got.Msg.Quotas.LiveGames != 20 || got.Msg.Quotas.MaxGameDurationS != 900 || got.Msg.UpdatedAt == nil {
			t.Fatalf("GetQuotas: %v, %v", got, err)
		}
	}
	_, err = qs.GetQuotas(ctx, req(&ludusv1.GetQuotasRequest{Tenant: "demo"}, otherAdmin))
	wantCode(t, err, connect.CodePermissionDenied, "reads only its own tenant")
	_, err = qs.GetQuotas(ctx, req(&ludusv1.GetQuotasRequest{}, operatorKey))
	wantCode(t, err, connect.CodeInvalidArgument, "needs tenant")
}

// TestUsageReportsAndAdmissionStanding: nodes (their credential) and
// gateways (the cluster token) report usage, once per report id; GetUsage
// shows it per hour to the tenant and the operator; GetTenantQuotas gives
// gateways the last hour's CPU and the archived bytes.
func TestUsageReportsAndAdmissionStanding(t *testing.T) {
	e := newEnv(t)
	e.clock.Add(15 * time.Minute) // 12:15
	tn, admin := e.createTenant("demo")
	other, otherAdmin := e.createTenant("other")
	qs := ludusv1connect.NewQuotaServiceClient(e.http.Client(), e.http.URL)
	qc := ludusv1connect.NewQuotaClusterServiceClient(e.http.Client(), e.http.URL)
	if _, err := qs.SetQuotas(ctx, req(&ludusv1.SetQuotasRequest{Tenant: "demo", Quotas: &ludusv1.Quotas{CpuSecondsPerHour: 3600, MaxGameDurationS: 600}}, operatorKey)); err != nil {
		t.Fatal(err)
	}
	node := nodeCred(t, clusterToken, "n1")

	report := func(cred, id, reporter string, d ...*ludusv1.UsageDelta) (*ludusv1.ReportUsageResponse, error) {
		r, err := qc.ReportUsage(ctx, req(&ludusv1.ReportUsageRequest{ReportId: id, Reporter: reporter, Usage: d}, cred))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	// Last hour (11:xx): 4000 CPU-seconds, reported only now (held back by
	// an outage) and booked in the hour it was used; this hour: 1000.
	hourAt := func(h int) int64 { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC).Unix() }
	if _, err := report(node, "r0", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 4000e6, HourUnix: hourAt(11)}); err != nil {
		t.Fatal(err)
	}
	resp, err := report(node, "r1", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 1000e6, EtcdWrites: 7, GamesTimedOut: 1},
		&ludusv1.UsageDelta{TenantId: other.Id, CpuMicros: 5e6})
	if err != nil {
		t.Fatal(err)
	}
	if resp.MaxGameDurationS[tn.Id] != 600 || len(resp.MaxGameDurationS) != 1 {
		t.Fatalf("durations answered = %v, want only demo's 600", resp.MaxGameDurationS)
	}
	// A retry of r1 adds nothing.
	if _, err := report(node, "r1", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 1000e6}); err != nil {
		t.Fatal(err)
	}
	if _, err := report(clusterToken, "g1", "gateway-a", &ludusv1.UsageDelta{TenantId: tn.Id, PlayerMillis: 3_600_000, StreamBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	// Bad reports are refused whole.
	for _, bad := range []struct {
		cred, id, reporter string
		d                  *ludusv1.UsageDelta
		code               connect.Code
		want               string
	}{
		{"", "x", "", &ludusv1.UsageDelta{TenantId: tn.Id}, connect.CodeUnauthenticated, "missing"},
		{"wrong-token-0123456789", "x", "", &ludusv1.UsageDelta{TenantId: tn.Id}, connect.CodeUnauthenticated, "wrong"},
		{node, "", "", &ludusv1.UsageDelta{TenantId: tn.Id}, connect.CodeInvalidArgument, "report_id"},
		{node, "bad id!", "", &ludusv1.UsageDelta{TenantId: tn.Id}, connect.CodeInvalidArgument, "report_id"},
		{clusterToken, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id}, connect.CodeInvalidArgument, "reporter"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: -1}, connect.CodeInvalidArgument, "usage[0].cpu_micros"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id, StreamBytes: 2e15}, connect.CodeInvalidArgument, "usage[0].stream_bytes"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: ""}, connect.CodeInvalidArgument, "tenant_id"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: "t_nobody", CpuMicros: 1}, connect.CodeInvalidArgument, "does not exist"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 1, HourUnix: hourAt(11) + 60}, connect.CodeInvalidArgument, "not the start of an hour"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 1, HourUnix: hourAt(13)}, connect.CodeInvalidArgument, "ahead of the backend's clock"},
		{node, "x", "", &ludusv1.UsageDelta{TenantId: tn.Id, CpuMicros: 1, HourUnix: hourAt(12) - 8*24*3600}, connect.CodeInvalidArgument, "old"},
	} {
		_, err := report(bad.cred, bad.id, bad.reporter, bad.d)
		wantCode(t, err, bad.code, bad.want)
	}
	_, err = report(node, "x", "", make([]*ludusv1.UsageDelta, backend.MaxUsageDeltas+1)...)
	wantCode(t, err, connect.CodeInvalidArgument, "at most")

	// The gateway's view: 1000 + 4000 × 45/60 = 4000 CPU-seconds in the last
	// hour, over 3600 until 12:21 (1000 + 4000 × (1-y) < 3600 → y > 0.35).
	_, err = qc.GetTenantQuotas(ctx, req(&ludusv1.GetTenantQuotasRequest{TenantId: tn.Id}, node))
	wantCode(t, err, connect.CodePermissionDenied, "needs the cluster token")
	if err := backend.NewArchiveClient(e.http.Client(), e.http.URL, node).Archive(ctx,
		&clusterv1.ArchiveGameRequest{TenantId: tn.Id, GameId: "g1", SpecJson: []byte(`{}`), Chunks: [][]byte{make([]byte, 98)}, State: "ended"}); err != nil {
		t.Fatal(err)
	}
	st, err := qc.GetTenantQuotas(ctx, req(&ludusv1.GetTenantQuotasRequest{TenantId: tn.Id}, clusterToken))
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Msg; m.CpuSecondsLastHour != 4000 || m.Quotas.CpuSecondsPerHour != 3600 || m.ArchiveBytes != 100 || m.TenantSlug != "demo" ||
		!m.CpuBelowQuotaAt.AsTime().Equal(time.Date(2026, 3, 1, 12, 21, 0, 0, time.UTC)) {
		t.Fatalf("standing = %v", m)
	}
	_, err = qc.GetTenantQuotas(ctx, req(&ludusv1.GetTenantQuotasRequest{TenantId: "t_nobody"}, clusterToken))
	wantCode(t, err, connect.CodeNotFound)

	// GetUsage: the tenant sees its own hours, the operator everyone's.
	u, err := qs.GetUsage(ctx, req(&ludusv1.GetUsageRequest{Since: timestamppb.New(e.clock.Now().Add(-2 * time.Hour))}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Msg.Records) != 2 {
		t.Fatalf("demo's usage = %v", u.Msg.Records)
	}
	cur := u.Msg.Records[1]
	if cur.CpuSeconds != 1000 || cur.PlayerSeconds != 3600 || cur.StreamBytes != 1<<20 || cur.EtcdWrites != 7 || cur.ArchiveBytes != 100 ||
		cur.GamesTimedOut != 1 || cur.TenantSlug != "demo" || !cur.Hour.AsTime().Equal(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("this hour's usage = %v", cur)
	}
	_, err = qs.GetUsage(ctx, req(&ludusv1.GetUsageRequest{Tenant: "demo"}, otherAdmin))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = qs.GetUsage(ctx, req(&ludusv1.GetUsageRequest{Since: timestamppb.New(e.clock.Now().Add(-100 * 24 * time.Hour))}, admin))
	wantCode(t, err, connect.CodeInvalidArgument, "since")
	all, err := qs.GetUsage(ctx, req(&ludusv1.GetUsageRequest{}, operatorKey))
	if err != nil || len(all.Msg.Records) != 3 {
		t.Fatalf("every tenant's usage: %v, %v", all, err)
	}
}

func TestCPUWindow(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 3, 1, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		prev, cur, limit float64
		now              time.Time
		used             float64
		below            time.Time
	}{
		{0, 100, 0, at(10, 30), 100, time.Time{}},                              // no limit
		{1000, 100, 3600, at(10, 30), 600, time.Time{}},                        // below
		{4000, 1000, 3600, at(10, 15), 4000, at(10, 21)},                       // prev leaves: 1000 + 4000(1-y) < 3600 → y > .35
		{0, 3600, 3600, at(10, 0), 3600, at(11, 0)},                            // at the limit: the next hour, right away
		{0, 7200, 3600, at(10, 59), 7200, at(11, 30)},                          // this hour's usage must leave: 7200(1-z) < 3600 → z > .5
		{7200, 7200, 3600, at(10, 30), 10800, at(11, 30)},                      // both
		{3600, 0, 3600, at(10, 0), 3600, at(10, 0)},                            // exactly at the hour: prev whole
		{1e6, 0, 3600, at(10, 59), 1e6 / 60, at(10, 59).Add(47 * time.Second)}, // 1e6(1-y) < 3600 → y > .9964: 10:59:47
	} {
		used, below := backend.CPUWindow(c.prev, c.cur, c.now, c.limit)
		if diff := used - c.used; diff > 1e-6 || diff < -1e-6 {
			t.Errorf("%+v: used %v, want %v", c, used, c.used)
		}
		if c.below.IsZero() != below.IsZero() || !c.below.IsZero() && below.Sub(c.below).Abs() > 59*time.Second {
			t.Errorf("%+v: below at %v, want about %v", c, below, c.below)
		}
	}
}
