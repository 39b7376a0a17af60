package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

func testGameArchives(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "arch")
	other := mustTenant(t, s, "arch-other")
	a := store.GameArchive{TenantID: tn.ID, GameID: "g1", SpecJSON: []byte(`{"module":"arena","seed":7}`),
		Chunks: [][]byte{{1, 2, 3}, {}, {0, 0xff, 'x', 0}}, State: "failed", Message: "trap: unreachable'; DROP TABLE x; --", FinalTick: 1234,
		GuestLog: []byte("guest\x00log"), ArchivedAt: base}
	must(t, "PutGameArchive", s.PutGameArchive(ctx, a))
	got, err := s.GameArchive(ctx, tn.ID, "g1")
	must(t, "GameArchive", err)
	if !bytes.Equal(got.SpecJSON, a.SpecJSON) || len(got.Chunks) != 3 || !bytes.Equal(got.Chunks[0], a.Chunks[0]) ||
		len(got.Chunks[1]) != 0 || !bytes.Equal(got.Chunks[2], a.Chunks[2]) || got.State != a.State || got.Message != a.Message ||
		got.FinalTick != 1234 || got.SizeBytes != int64(len(a.SpecJSON)+3+0+4+9) || !sameTime(got.ArchivedAt, base) ||
		!bytes.Equal(got.GuestLog, a.GuestLog) {
		t.Fatalf("GameArchive = %+v, want %+v", got, a)
	}
	// Another tenant's game: not found.
	_, err = s.GameArchive(ctx, other.ID, "g1")
	wantErr(t, "GameArchive of another tenant", err, store.ErrNotFound)
	// Archiving again replaces (idempotent; fewer chunks leave none behind),
	// except the guest log: an archive without one (another node archived the
	// same game) keeps the one stored.
	a2 := a
	a2.Chunks, a2.State, a2.Message, a2.ArchivedAt = [][]byte{[]byte("only")}, "ended", "match ended after 1234 ticks (build 0123456789ab)", base.Add(time.Second)
	a2.GuestLog = nil
	must(t, "PutGameArchive again", s.PutGameArchive(ctx, a2))
	must(t, "PutGameArchive again", s.PutGameArchive(ctx, a2))
	got, err = s.GameArchive(ctx, tn.ID, "g1")
	must(t, "GameArchive", err)
	if len(got.Chunks) != 1 || string(got.Chunks[0]) != "only" || got.State != "ended" || got.Message != a2.Message || got.FinalTick != 1234 ||
		!bytes.Equal(got.GuestLog, a.GuestLog) || got.SizeBytes != int64(len(a.SpecJSON)+4+len(a.GuestLog)) {
		t.Fatalf("after re-archive without a guest log: %+v", got)
	}
	// A repeat that carries a guest log replaces it.
	a2.GuestLog = []byte("newer lines")
	must(t, "PutGameArchive with a guest log", s.PutGameArchive(ctx, a2))
	if got, err = s.GameArchive(ctx, tn.ID, "g1"); err != nil || string(got.GuestLog) != "newer lines" {
		t.Fatalf("after re-archive with a guest log: %+v, %v", got, err)
	}
	a2.GuestLog = nil
	// Empty log.
	must(t, "PutGameArchive empty", s.PutGameArchive(ctx, store.GameArchive{TenantID: tn.ID, GameID: "g0", ArchivedAt: base.Add(2 * time.Second)}))
	if got, err := s.GameArchive(ctx, tn.ID, "g0"); err != nil || len(got.Chunks) != 0 || len(got.SpecJSON) != 0 {
		t.Fatalf("empty archive: %+v, %v", got, err)
	}
	ls, err := s.ListGameArchives(ctx, tn.ID, 10)
	must(t, "ListGameArchives", err)
	if len(ls) != 2 || ls[0].GameID != "g0" || ls[1].GameID != "g1" || ls[1].Chunks != nil || ls[1].SizeBytes != int64(len(a.SpecJSON)+4+len("newer lines")) ||
		ls[1].State != "ended" || ls[1].Message != a2.Message || ls[1].FinalTick != 1234 {
		t.Fatalf("ListGameArchives = %+v", ls)
	}
	if ls, _ := s.ListGameArchives(ctx, other.ID, 10); len(ls) != 0 {
		t.Fatalf("other tenant lists %+v", ls)
	}
	err = s.PutGameArchive(ctx, store.GameArchive{TenantID: "t_nope", GameID: "g1", ArchivedAt: base})
	wantErr(t, "PutGameArchive for an unknown tenant", err, store.ErrNotFound)
}

func testDeviceSession(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "dev")
	a := store.Account{ID: id("a_"), TenantID: tn.ID, DeviceID: "device-1", DisplayName: "first", CreatedAt: base, UpdatedAt: base}
	got, created, err := s.DeviceSession(ctx, a, "", refresh("r1", base))
	must(t, "DeviceSession", err)
	if !created || got.ID != a.ID || got.DisplayName != "first" {
		t.Fatalf("first DeviceSession = %+v, %v", got, created)
	}
	// Same device again: the same account, renamed, and a second token.
	b := a
	b.ID, b.UpdatedAt = id("a_"), base.Add(time.Second)
	got, created, err = s.DeviceSession(ctx, b, "renamed", refresh("r2", base))
	must(t, "DeviceSession again", err)
	if created || got.ID != a.ID || got.DisplayName != "renamed" {
		t.Fatalf("second DeviceSession = %+v, %v", got, created)
	}
	if acc, _ := s.AccountByDevice(ctx, tn.ID, "device-1"); acc.DisplayName != "renamed" {
		t.Fatalf("stored account %+v", acc)
	}
	if _, err := s.AccountByID(ctx, tn.ID, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second account was stored: %v", err)
	}
	for _, h := range []string{"r1", "r2"} {
		old, err := s.UseRefreshToken(ctx, hash(h), base, refresh(h+"-next", base))
		if err != nil || old.AccountID != a.ID || old.TenantID != tn.ID {
			t.Fatalf("UseRefreshToken(%s) = %+v, %v", h, old, err)
		}
	}
	c := a
	c.ID, c.TenantID, c.DeviceID = id("a_"), "t_nope", "device-2"
	_, _, err = s.DeviceSession(ctx, c, "", refresh("r3", base))
	wantErr(t, "DeviceSession for an unknown tenant", err, store.ErrNotFound)
}

// testConcurrentWritesIsolated runs many concurrent writes, some failing:
// each fails or succeeds on its own (stores may commit concurrent writes
// together) and every successful one is stored.
func testConcurrentWritesIsolated(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "conc")
	mustAccount(t, s, tn.ID, "taken-device")
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := fmt.Sprintf("device-%d", i)
			if i%4 == 0 {
				dev = "taken-device" // conflicts
			}
			errs[i] = s.CreateAccount(ctx, store.Account{ID: fmt.Sprintf("a_conc_%d", i), TenantID: tn.ID, DeviceID: dev,
				DisplayName: "x", CreatedAt: base, UpdatedAt: base})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		_, gerr := s.AccountByID(ctx, tn.ID, fmt.Sprintf("a_conc_%d", i))
		if i%4 == 0 {
			wantErr(t, "conflicting CreateAccount", err, store.ErrAlreadyExists)
			wantErr(t, "conflicting account", gerr, store.ErrNotFound)
		} else {
			must(t, "CreateAccount", err)
			must(t, "stored account", gerr)
		}
	}
}

// testBatchResultPages reads a run's results a page at a time: by game from
// FromGame, at most Limit, no more bytes than MaxBytes unless one result
// alone holds more, logs only when asked, with more saying what follows.
func testBatchResultPages(t *testing.T, s store.Store) {
	bs, ok := s.(store.BatchStore)
	if !ok {
		t.Skip("store keeps no batch runs")
	}
	ctx := context.Background()
	tn := mustTenant(t, s, "pages")
	run := store.BatchRun{TenantID: tn.ID, RunID: "r1", State: "running", Games: 10, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	if err := bs.PutBatchRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	// Games 9 down to 0 (stored out of order); game g's result is
	// 100*(g+1) bytes and even games keep a log of 1000+g bytes.
	for g := 9; g >= 0; g-- {
		r := store.BatchResult{TenantID: tn.ID, RunID: "r1", Game: g, Map: "m", Seed: uint64(g), Winner: g % 3,
			Result: bytes.Repeat([]byte{'7'}, 100*(g+1))}
		if g%2 == 0 {
			r.Log = bytes.Repeat([]byte{byte(g)}, 1000+g)
		}
		if ok, err := bs.PutBatchResult(ctx, r, 0); err != nil || !ok {
			t.Fatalf("put game %d: %v %v", g, ok, err)
		}
	}
	page := func(q store.BatchResultQuery) ([]int, bool) {
		t.Helper()
		rs, more, err := bs.BatchResults(ctx, tn.ID, "r1", q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		var games []int
		for _, r := range rs {
			games = append(games, r.Game)
			if len(r.Result) != 100*(r.Game+1) || r.Seed != uint64(r.Game) {
				t.Errorf("game %d: result of %d bytes, seed %d", r.Game, len(r.Result), r.Seed)
			}
			wantLog := 0
			if r.Game%2 == 0 {
				wantLog = 1000 + r.Game
			}
			if r.LogBytes != wantLog {
				t.Errorf("game %d: LogBytes %d, want %d", r.Game, r.LogBytes, wantLog)
			}
			if q.WithLogs && len(r.Log) != wantLog || !q.WithLogs && len(r.Log) != 0 {
				t.Errorf("game %d (logs asked: %v): a log of %d bytes", r.Game, q.WithLogs, len(r.Log))
			}
		}
		return games, more
	}
	check := func(what string, q store.BatchResultQuery, want []int, wantMore bool) {
		t.Helper()
		got, more := page(q)
		if fmt.Sprint(got) != fmt.Sprint(want) || more != wantMore {
			t.Errorf("%s: games %v more %v, want %v more %v", what, got, more, want, wantMore)
		}
	}
	check("all", store.BatchResultQuery{Limit: 10}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, false)
	check("limit", store.BatchResultQuery{Limit: 4}, []int{0, 1, 2, 3}, true)
	check("from", store.BatchResultQuery{FromGame: 4, Limit: 4}, []int{4, 5, 6, 7}, true)
	check("last page", store.BatchResultQuery{FromGame: 8, Limit: 4}, []int{8, 9}, false)
	check("exactly the rest", store.BatchResultQuery{FromGame: 6, Limit: 4}, []int{6, 7, 8, 9}, false)
	check("past the end", store.BatchResultQuery{FromGame: 10, Limit: 4}, nil, false)
	// Bytes: games 0..2 hold 100+200+300 = 600 result bytes; game 3 would
	// pass 700. With logs, game 0 alone holds 1100.
	check("bytes", store.BatchResultQuery{Limit: 10, MaxBytes: 700}, []int{0, 1, 2}, true)
	check("bytes exactly", store.BatchResultQuery{Limit: 10, MaxBytes: 600}, []int{0, 1, 2}, true)
	check("bytes with logs", store.BatchResultQuery{Limit: 10, MaxBytes: 1300, WithLogs: true}, []int{0, 1}, true)
	check("one result over the bound", store.BatchResultQuery{Limit: 10, MaxBytes: 10, WithLogs: true}, []int{0}, true)
	check("since later", store.BatchResultQuery{Since: time.Now().Add(time.Hour), Limit: 10}, nil, false)
	if rs, more, err := bs.BatchResults(ctx, tn.ID, "r2", store.BatchResultQuery{Limit: 10}); err != nil || len(rs) != 0 || more {
		t.Errorf("a run with no results: %d results, more %v, %v", len(rs), more, err)
	}
	for _, limit := range []int{0, -1, store.MaxBatchResultPage + 1} {
		if _, _, err := bs.BatchResults(ctx, tn.ID, "r1", store.BatchResultQuery{Limit: limit}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

// testBatchSettingsWrites: the policy and the link key are written apart,
// each keeping the other; a first key (ifNone) never replaces one set.
func testBatchSettingsWrites(t *testing.T, s store.Store) {
	bs, ok := s.(store.BatchStore)
	if !ok {
		t.Skip("store keeps no batch runs")
	}
	ctx := context.Background()
	tn := mustTenant(t, s, "batchset")
	must(t, "policy", bs.PutBatchPolicy(ctx, tn.ID, 48*time.Hour, 7e9))
	k1, k2, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	key := func(tenant, what string, k []byte, ifNone bool, want []byte) {
		t.Helper()
		got, err := bs.PutBatchLinkKey(ctx, tenant, k, ifNone)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: key %x, %v; want %x", what, got, err, want)
		}
	}
	key(tn.ID, "first key", k1, true, k1)
	key(tn.ID, "a second first key", k2, true, k1)
	key(tn.ID, "a rotation", k3, false, k3)
	must(t, "policy again", bs.PutBatchPolicy(ctx, tn.ID, time.Hour, 9e9))
	set, err := bs.BatchSettings(ctx, tn.ID)
	if err != nil || !bytes.Equal(set.LinkKey, k3) || set.Retention != time.Hour || set.CapCPUNanos != 9e9 {
		t.Fatalf("settings %+v, %v: want key 3, 1 h, 9e9", set, err)
	}
	// A key first, on a tenant without settings, then a policy.
	tn2 := mustTenant(t, s, "batchset2")
	key(tn2.ID, "a key without settings", k2, true, k2)
	must(t, "policy after the key", bs.PutBatchPolicy(ctx, tn2.ID, 0, 0))
	if set, err := bs.BatchSettings(ctx, tn2.ID); err != nil || !bytes.Equal(set.LinkKey, k2) {
		t.Fatalf("settings %+v, %v: the policy lost the key", set, err)
	}
}

// testBatchRunBytes: a run's stored results stay within the byte bound
// given; a result that does not fit is not stored (ErrRunFull) and counts
// nothing, nor does a second result of a game; a bound of 0 takes any.
func testBatchRunBytes(t *testing.T, s store.Store) {
	bs, ok := s.(store.BatchStore)
	if !ok {
		t.Skip("store keeps no batch runs")
	}
	ctx := context.Background()
	tn := mustTenant(t, s, "runbytes")
	run := store.BatchRun{TenantID: tn.ID, RunID: "r1", State: "running", Games: 10, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	must(t, "PutBatchRun", bs.PutBatchRun(ctx, run))
	put := func(game, size int, bound int64) (bool, error) {
		r := store.BatchResult{TenantID: tn.ID, RunID: "r1", Game: game, Map: "m", Result: bytes.Repeat([]byte{'r'}, size/2), Log: bytes.Repeat([]byte{'l'}, size-size/2)}
		return bs.PutBatchResult(ctx, r, bound)
	}
	for g := range 2 {
		if ok, err := put(g, 400, 1000); err != nil || !ok {
			t.Fatalf("game %d within the bound: %v %v", g, ok, err)
		}
	}
	if ok, err := put(0, 400, 1000); err != nil || ok {
		t.Fatalf("a second result of game 0: %v %v, want not stored and no error", ok, err)
	}
	if ok, err := put(2, 201, 1000); !errors.Is(err, store.ErrRunFull) || ok {
		t.Fatalf("a result past the bound: %v %v, want ErrRunFull", ok, err)
	}
	if ok, err := put(2, 200, 1000); err != nil || !ok {
		t.Fatalf("a result that just fits (the refused one and the duplicate counted nothing): %v %v", ok, err)
	}
	if ok, err := put(3, 1, 1000); !errors.Is(err, store.ErrRunFull) || ok {
		t.Fatalf("a result past a full run: %v %v", ok, err)
	}
	if ok, err := put(3, 50, 0); err != nil || !ok {
		t.Fatalf("no bound: %v %v", ok, err)
	}
	rs, _, err := bs.BatchResults(ctx, tn.ID, "r1", store.BatchResultQuery{Limit: 10})
	must(t, "BatchResults", err)
	if len(rs) != 4 {
		t.Fatalf("%d results stored, want 4 (games 0-3)", len(rs))
	}
}
