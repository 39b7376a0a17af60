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
	// Archiving again replaces (idempotent; fewer chunks leave none behind).
	a2 := a
	a2.Chunks, a2.State, a2.Message, a2.ArchivedAt = [][]byte{[]byte("only")}, "ended", "match ended after 1234 ticks (build 0123456789ab)", base.Add(time.Second)
	a2.GuestLog = nil
	must(t, "PutGameArchive again", s.PutGameArchive(ctx, a2))
	must(t, "PutGameArchive again", s.PutGameArchive(ctx, a2))
	got, err = s.GameArchive(ctx, tn.ID, "g1")
	must(t, "GameArchive", err)
	if len(got.Chunks) != 1 || string(got.Chunks[0]) != "only" || got.State != "ended" || got.Message != a2.Message || got.FinalTick != 1234 ||
		len(got.GuestLog) != 0 {
		t.Fatalf("after re-archive: %+v", got)
	}
	// Empty log.
	must(t, "PutGameArchive empty", s.PutGameArchive(ctx, store.GameArchive{TenantID: tn.ID, GameID: "g0", ArchivedAt: base.Add(2 * time.Second)}))
	if got, err := s.GameArchive(ctx, tn.ID, "g0"); err != nil || len(got.Chunks) != 0 || len(got.SpecJSON) != 0 {
		t.Fatalf("empty archive: %+v, %v", got, err)
	}
	ls, err := s.ListGameArchives(ctx, tn.ID, 10)
	must(t, "ListGameArchives", err)
	if len(ls) != 2 || ls[0].GameID != "g0" || ls[1].GameID != "g1" || ls[1].Chunks != nil || ls[1].SizeBytes != int64(len(a.SpecJSON)+4) ||
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
