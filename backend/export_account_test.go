package backend_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// TestExportAccountWhole: an export carries every ledger entry and match
// result of the account, past the 100,000 rows exports were once cut at
// without a word (SQLite; PostgreSQL with a smaller ledger, the same
// code), in the JSON exports always had; and an export larger than the
// bound is refused, ResourceExhausted, naming what the account holds.
func TestExportAccountWhole(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testExportAccountWhole(t, newEnv(t), 1563) })
	t.Run("postgres", func(t *testing.T) { testExportAccountWhole(t, newEnvPostgres(t), 20) })
}

func testExportAccountWhole(t *testing.T, e *env, grants int) {
	tenant, admin := e.createTenant("export")
	a := e.guestLogin("export", "device-export-0001", "Ada").AccountId
	b := e.guestLogin("export", "device-export-0002", "Bob").AccountId
	st := e.store

	// grants × 64 ledger entries: 100,032 on SQLite.
	currency := map[string]int64{}
	for i := range 64 {
		currency[fmt.Sprintf("c%02d", i)] = 1
	}
	var wg sync.WaitGroup
	errs := make(chan error, grants)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < grants; i += 8 {
				_, err := st.ApplyChange(ctx, store.Change{TenantID: tenant.Id, AccountID: a, Key: fmt.Sprint("g", i), Currency: currency,
					Reason: "grant <&>", At: time.Date(2026, 3, 1, 12, 0, 0, i*1000, time.UTC)})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 3 {
		mid := fmt.Sprint("match-", i)
		if err := st.CreateMatch(ctx, store.Match{TenantID: tenant.Id, ID: mid, Game: "arena", CredentialHash: []byte(mid),
			CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyMatchReport(ctx, store.MatchReport{TenantID: tenant.Id, MatchID: mid, Final: true, At: e.clock.Now().Add(time.Duration(i) * time.Second),
			Players: []store.PlayerReport{{AccountID: a, Score: 10, XP: 5, Stats: map[string]int64{"kills": int64(i)}, Place: 1},
				{AccountID: b, Score: 20, Place: 2}}}); err != nil {
			t.Fatal(err)
		}
	}

	resp, err := e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: a}, admin))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ledger  []json.RawMessage
		Matches []struct {
			MatchID string `json:"match_id"`
			Result  struct{ AccountID string }
		}
	}
	if err := json.Unmarshal(resp.Msg.Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Ledger) != grants*64 || len(got.Matches) != 3 || got.Matches[0].MatchID != "match-2" || got.Matches[0].Result.AccountID != a {
		t.Fatalf("export: %d ledger entries (want %d), matches %+v", len(got.Ledger), grants*64, got.Matches)
	}
	// The same bytes as the format exports had, built in memory whole.
	if want := oldExport(t, st, tenant.Id, a); !bytes.Equal(resp.Msg.Data, want) {
		n := 0
		for n < min(len(want), len(resp.Msg.Data)) && want[n] == resp.Msg.Data[n] {
			n++
		}
		t.Fatalf("export differs from the format at byte %d: got %q, want %q", n, clipBytes(resp.Msg.Data[n:]), clipBytes(want[n:]))
	}

	// Past the bound: refused, nothing cut.
	e.stop()
	e.opts = append(e.opts, func(c *backend.Config) { backend.SetExportMaxBytes(c, 4096) })
	e.restart()
	_, err = e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: a}, admin))
	wantCode(t, err, connect.CodeResourceExhausted, "larger than 4096 bytes", fmt.Sprintf("%d ledger entries and 3 match results", grants*64),
		"nothing was cut", "Exporting a large account")
	// A small account still fits.
	resp, err = e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: b}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if want := oldExport(t, e.store, tenant.Id, b); !bytes.Equal(resp.Msg.Data, want) {
		t.Fatalf("export of b = %s, want %s", resp.Msg.Data, want)
	}
}

// oldExport builds an export the way ExportAccount did before it streamed
// (everything in memory, then json.MarshalIndent), without its row limits.
func oldExport(t *testing.T, st store.Store, tenantID, accountID string) []byte {
	t.Helper()
	a, err := st.AccountByID(ctx, tenantID, accountID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Progression(ctx, tenantID, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := st.Ledger(ctx, tenantID, a.ID, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	results, err := st.ListMatchResults(ctx, tenantID, a.ID, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	type playerOut struct {
		MatchID string             `json:"match_id"`
		Game    string             `json:"game"`
		EndedAt string             `json:"ended_at"`
		Result  store.PlayerReport `json:"result"`
	}
	var matches []playerOut
	for _, r := range results {
		for _, pr := range r.Players {
			if pr.AccountID == a.ID {
				matches = append(matches, playerOut{r.MatchID, r.Game, r.EndedAt.Format("2006-01-02T15:04:05.000000Z"), pr})
			}
		}
	}
	data, err := json.MarshalIndent(map[string]any{
		"account": map[string]any{"id": a.ID, "display_name": a.DisplayName, "device_id": a.DeviceID, "email": a.Email,
			"custom_id": a.CustomID, "has_password": a.PasswordHash != "", "created_at": a.CreatedAt, "updated_at": a.UpdatedAt},
		"progression": p,
		"ledger":      ledger,
		"matches":     matches,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func clipBytes(b []byte) []byte { return b[:min(len(b), 80)] }
