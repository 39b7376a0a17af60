package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for tenant quotas, metered usage and archive sizes.

func testQuotas(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "quota"), mustTenant(t, s, "quota2")
	q, err := s.Quotas(ctx, tn.ID)
	must(t, "quotas before any", err)
	if q != (store.Quotas{TenantID: tn.ID}) {
		t.Fatalf("quotas never put = %+v, want all zero", q)
	}
	want := store.Quotas{TenantID: tn.ID, LiveGames: 20, GamesPerMinute: 5, CPUSecondsPerHour: 3600, ArchiveBytes: 1 << 40,
		MaxGameDurationS: 900, UpdatedAt: base}
	must(t, "put", s.PutQuotas(ctx, want))
	got, err := s.Quotas(ctx, tn.ID)
	must(t, "get", err)
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("updated_at = %v, want %v", got.UpdatedAt, want.UpdatedAt)
	}
	got.UpdatedAt = want.UpdatedAt
	if got != want {
		t.Fatalf("quotas = %+v, want %+v", got, want)
	}
	// Replacing keeps nothing of the old values.
	want = store.Quotas{TenantID: tn.ID, LiveGames: 1, UpdatedAt: base.Add(time.Minute)}
	must(t, "replace", s.PutQuotas(ctx, want))
	got, err = s.Quotas(ctx, tn.ID)
	must(t, "get replaced", err)
	got.UpdatedAt = want.UpdatedAt
	if got != want {
		t.Fatalf("replaced quotas = %+v, want %+v", got, want)
	}
	q, err = s.Quotas(ctx, other.ID)
	must(t, "other tenant's quotas", err)
	if q.LiveGames != 0 {
		t.Fatalf("another tenant's quotas leaked: %+v", q)
	}
	wantErr(t, "quotas of an unknown tenant", s.PutQuotas(ctx, store.Quotas{TenantID: "t_nobody", LiveGames: 1, UpdatedAt: base}), store.ErrNotFound)
}

func testUsage(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "usage"), mustTenant(t, s, "usage2")
	h0 := base.Truncate(time.Hour)
	h1 := h0.Add(time.Hour)
	rec := func(tenant string, hour time.Time, cpu int64) store.UsageRecord {
		return store.UsageRecord{TenantID: tenant, Hour: hour, CPUMicros: cpu, PlayerMillis: 2 * cpu, StreamBytes: 3 * cpu,
			EtcdWrites: 4 * cpu, ArchiveBytes: 5 * cpu, GamesTimedOut: 1}
	}
	applied, err := s.AddUsage(ctx, "node:n1", "r1", base, []store.UsageRecord{rec(tn.ID, h0, 10), rec(other.ID, h0, 7)})
	must(t, "add", err)
	if !applied {
		t.Fatal("first report not applied")
	}
	// The same report again (a retry) adds nothing; another reporter's report
	// with the same id does.
	applied, err = s.AddUsage(ctx, "node:n1", "r1", base.Add(time.Second), []store.UsageRecord{rec(tn.ID, h0, 10)})
	must(t, "retry", err)
	if applied {
		t.Fatal("a repeated report was applied again")
	}
	applied, err = s.AddUsage(ctx, "gw:g1", "r1", base, []store.UsageRecord{rec(tn.ID, h0, 1), rec(tn.ID, h1, 100)})
	must(t, "other reporter", err)
	if !applied {
		t.Fatal("another reporter's report with the same id was not applied")
	}
	got, err := s.Usage(ctx, tn.ID, h0)
	must(t, "usage", err)
	if len(got) != 2 || got[1].CPUMicros != 100 {
		t.Fatalf("usage = %+v", got)
	}
	if w := (store.UsageRecord{TenantID: tn.ID, Hour: h0, CPUMicros: 11, PlayerMillis: 22, StreamBytes: 33, EtcdWrites: 44,
		ArchiveBytes: 55, GamesTimedOut: 2}); !got[0].Hour.Equal(w.Hour) || got[0].CPUMicros != w.CPUMicros ||
		got[0].PlayerMillis != w.PlayerMillis || got[0].StreamBytes != w.StreamBytes || got[0].EtcdWrites != w.EtcdWrites ||
		got[0].ArchiveBytes != w.ArchiveBytes || got[0].GamesTimedOut != w.GamesTimedOut {
		t.Fatalf("hour 0 = %+v, want %+v", got[0], w)
	}
	got, err = s.Usage(ctx, tn.ID, h1)
	must(t, "usage since h1", err)
	if len(got) != 1 || !got[0].Hour.Equal(h1) {
		t.Fatalf("usage since h1 = %+v", got)
	}
	all, err := s.Usage(ctx, "", h0)
	must(t, "all tenants", err)
	if len(all) != 3 || !all[0].Hour.Equal(h0) || !all[2].Hour.Equal(h1) || all[0].TenantID > all[1].TenantID {
		t.Fatalf("every tenant's usage = %+v", all)
	}
	// All or nothing: a record of an unknown tenant refuses the report, and
	// its id stays unused.
	_, err = s.AddUsage(ctx, "node:n1", "r2", base, []store.UsageRecord{rec(tn.ID, h0, 1000), rec("t_nobody", h0, 1)})
	wantErr(t, "unknown tenant", err, store.ErrNotFound)
	got, _ = s.Usage(ctx, tn.ID, h0)
	if got[0].CPUMicros != 11 {
		t.Fatalf("a refused report added usage: %+v", got[0])
	}
	applied, err = s.AddUsage(ctx, "node:n1", "r2", base, []store.UsageRecord{rec(tn.ID, h0, 1)})
	if err != nil || !applied {
		t.Fatalf("the id of a refused report: applied %v, err %v", applied, err)
	}
	// Report ids are forgotten after two days.
	applied, err = s.AddUsage(ctx, "node:n1", "r1", base.Add(49*time.Hour), []store.UsageRecord{rec(tn.ID, h0, 1)})
	if err != nil || !applied {
		t.Fatalf("an id 49 h old: applied %v, err %v", applied, err)
	}

	// Concurrent reports of one tenant and hour all add up.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AddUsage(ctx, "node:c", fmt.Sprint("c", i), base, []store.UsageRecord{{TenantID: other.ID, Hour: h1, CPUMicros: 1}}); err != nil {
				t.Errorf("concurrent add: %v", err)
			}
		}()
	}
	wg.Wait()
	got, err = s.Usage(ctx, other.ID, h1)
	must(t, "concurrent usage", err)
	if len(got) != 1 || got[0].CPUMicros != 16 {
		t.Fatalf("16 concurrent reports of 1 µs = %+v", got)
	}
}

func testArchiveBytes(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "arcb"), mustTenant(t, s, "arcb2")
	n, err := s.ArchiveBytes(ctx, tn.ID)
	if err != nil || n != 0 {
		t.Fatalf("no archives: %d, %v", n, err)
	}
	put := func(tenant, game string, spec string, chunks ...string) {
		a := store.GameArchive{TenantID: tenant, GameID: game, SpecJSON: []byte(spec), State: "ended", ArchivedAt: base}
		for _, c := range chunks {
			a.Chunks = append(a.Chunks, []byte(c))
		}
		must(t, "archive", s.PutGameArchive(ctx, a))
	}
	put(tn.ID, "g1", "{}", "abc", "de")     // 7
	put(tn.ID, "g2", "{...}", "x")          // 6
	put(other.ID, "g1", "{}", "0123456789") // another tenant's
	put(tn.ID, "g1", "{}", "a")             // replaced: 3
	n, err = s.ArchiveBytes(ctx, tn.ID)
	if err != nil || n != 9 {
		t.Fatalf("archive bytes = %d, %v; want 9", n, err)
	}
	// Archiving is metered in the archive's hour, by the growth it makes.
	u, err := s.Usage(ctx, tn.ID, base.Truncate(time.Hour))
	must(t, "usage", err)
	if len(u) != 1 || u[0].ArchiveBytes != 9 {
		t.Fatalf("metered archive bytes = %+v, want one hour of 9", u)
	}
}
