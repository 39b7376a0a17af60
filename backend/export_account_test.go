package backend_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
// code), in the JSON exports always had; and every other kind of row kept
// of the account (applied change keys, leaderboard rows, ratings,
// sessions, unfinished matches, the match rosters it is on, failed
// sign-ins), without its secrets, and none of another account's or
// another tenant's; and
// an export larger than the bound is refused, ResourceExhausted, naming
// what the account holds.
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
	// Rosters (a match's is closed by its result): a on match-0, then on
	// match-2 and match-running at the same time; b on match-0 and
	// match-1; another tenant's account on that tenant's match-0.
	rosters := map[string][]string{"match-0": {a, b}, "match-1": {b}, "match-2": {a}}
	start := e.clock.Now()
	rosterAt := func(mid string) time.Time {
		if mid == "match-0" {
			return start
		}
		return start.Add(2 * time.Second)
	}
	for i := range 3 {
		mid := fmt.Sprint("match-", i)
		if err := st.CreateMatch(ctx, store.Match{TenantID: tenant.Id, ID: mid, Game: "arena", CredentialHash: []byte(mid),
			CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := st.AddMatchPlayers(ctx, tenant.Id, mid, rosters[mid], rosterAt(mid)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyMatchReport(ctx, store.MatchReport{TenantID: tenant.Id, MatchID: mid, Final: true, At: e.clock.Now().Add(time.Duration(i) * time.Second),
			Players: []store.PlayerReport{{AccountID: a, Score: 10, XP: 5, Stats: map[string]int64{"kills": int64(i)}, Place: 1},
				{AccountID: b, Score: 20, Place: 2}}}); err != nil {
			t.Fatal(err)
		}
	}

	// A stat board and a rating (match-3's result), a match with an
	// interim report only, a second session of a (signed in again) and
	// its first one signed out.
	if err := st.CreateMatch(ctx, store.Match{TenantID: tenant.Id, ID: "match-3", Game: "arena", CredentialHash: []byte("match-3"),
		CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rate := func(before []store.Rating) ([]store.Rating, error) {
		for i := range before {
			before[i].Rating, before[i].RD, before[i].Volatility = 1612.5, 240.25, 0.06
		}
		return before, nil
	}
	if _, err := st.ApplyMatchReport(ctx, store.MatchReport{TenantID: tenant.Id, MatchID: "match-3", Final: true, At: e.clock.Now().Add(3 * time.Second),
		Players: []store.PlayerReport{{AccountID: a, Score: 30, Stats: map[string]int64{"kills": 7}, Place: 1}, {AccountID: b, Score: 1, Place: 2}},
		Boards:  []store.BoardEntry{{Board: "arena/kills", AccountID: a, Value: 7}},
		Rating:  &store.RatingUpdate{Mode: "duel", Rate: rate}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMatch(ctx, store.Match{TenantID: tenant.Id, ID: "match-running", Game: "arena", CredentialHash: []byte("match-running"),
		CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyMatchReport(ctx, store.MatchReport{TenantID: tenant.Id, MatchID: "match-running", Seq: 1, At: e.clock.Now(),
		Players: []store.PlayerReport{{AccountID: a, Score: 4, XP: 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddMatchPlayers(ctx, tenant.Id, "match-running", []string{a}, rosterAt("match-running")); err != nil {
		t.Fatal(err)
	}
	other, _ := e.createTenant("export-other")
	stranger := e.guestLogin("export-other", "device-export-0003", "Eve").AccountId
	if err := st.CreateMatch(ctx, store.Match{TenantID: other.Id, ID: "match-0", Game: "arena", CredentialHash: []byte("other-match-0"),
		CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddMatchPlayers(ctx, other.Id, "match-0", []string{stranger}, e.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	first := e.guestLogin("export", "device-export-0001", "Ada") // a's second session
	e.clock.Add(time.Minute)
	second := e.guestLogin("export", "device-export-0001", "Ada")
	if _, err := e.auth.Logout(ctx, connect.NewRequest(&ludusv1.LogoutRequest{Tenant: "export", RefreshToken: first.RefreshToken})); err != nil {
		t.Fatal(err)
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
		AppliedChanges []struct{ Key string }  `json:"applied_changes"`
		Leaderboards   []exportBoard           `json:"leaderboards"`
		Ratings        []exportRating          `json:"ratings"`
		Sessions       []exportSession         `json:"sessions"`
		Unfinished     []exportUnfinishedMatch `json:"unfinished_matches"`
		Rosters        []exportRosterEntry     `json:"match_rosters"`
		Throttle       *exportThrottle         `json:"sign_in_throttle"`
	}
	if err := json.Unmarshal(resp.Msg.Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Ledger) != grants*64 || len(got.Matches) != 4 || got.Matches[0].MatchID != "match-3" || got.Matches[0].Result.AccountID != a {
		t.Fatalf("export: %d ledger entries (want %d), matches %+v", len(got.Ledger), grants*64, got.Matches)
	}
	// A change key per grant and per report that credited a.
	if n := len(got.AppliedChanges); n != grants+5 || got.AppliedChanges[0].Key != "match/match-3/final" {
		t.Fatalf("export: %d applied changes (want %d), the newest %+v", n, grants+5, got.AppliedChanges[:min(n, 1)])
	}
	if want := []exportBoard{{"arena", 30, 60, 4}, {"arena/kills", 7, 7, 1}}; !slices.Equal(got.Leaderboards, want) {
		t.Fatalf("export: leaderboards %+v, want %+v", got.Leaderboards, want)
	}
	if r := got.Ratings; len(r) != 1 || r[0].Mode != "duel" || r[0].Rating != 1612.5 || r[0].RD != 240.25 || r[0].Volatility != 0.06 || r[0].Matches != 1 {
		t.Fatalf("export: ratings %+v", r)
	}
	// Three sign-ins: the newest first, the signed-out one revoked.
	if ss := got.Sessions; len(ss) != 3 || ss[0].Revoked || ss[1].Revoked == ss[2].Revoked ||
		!ss[0].LastTokenAt.Equal(second.RefreshExpiresAt.AsTime().Add(-backend.RefreshTTL)) {
		t.Fatalf("export: sessions %+v", ss)
	}
	if u := got.Unfinished; len(u) != 1 || u[0].MatchID != "match-running" || u[0].Reported.Score != 4 || u[0].Reported.XP != 2 {
		t.Fatalf("export: unfinished matches %+v", u)
	}
	// Newest first, ties by match id: not b's, nor the other tenant's.
	if want := []exportRosterEntry{{"match-2", rosterAt("match-2")}, {"match-running", rosterAt("match-running")}, {"match-0", rosterAt("match-0")}}; !slices.EqualFunc(got.Rosters, want, func(x, y exportRosterEntry) bool {
		return x.MatchID == y.MatchID && x.AddedAt.Equal(y.AddedAt)
	}) {
		t.Fatalf("export: match rosters %+v, want %+v", got.Rosters, want)
	}
	if got.Throttle != nil {
		t.Fatalf("export: a guest has a sign-in throttle %+v", got.Throttle)
	}
	// No secrets: no refresh token, nor its hash.
	for _, tok := range []string{first.RefreshToken, second.RefreshToken} {
		sum := sha256.Sum256([]byte(tok))
		for _, secret := range []string{tok, hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:])} {
			if bytes.Contains(resp.Msg.Data, []byte(secret)) {
				t.Fatalf("export carries a refresh token or its hash %q", secret)
			}
		}
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
	wantCode(t, err, connect.CodeResourceExhausted, "larger than 4096 bytes",
		fmt.Sprintf("%d ledger entries, 4 match results, 1 unfinished matches, 3 match rosters, %d applied changes, 2 leaderboard entries, 1 ratings and 3 sessions", grants*64, grants+5),
		"nothing was cut", "Exporting a large account")
	// A small account still fits.
	resp, err = e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: b}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if want := oldExport(t, e.store, tenant.Id, b); !bytes.Equal(resp.Msg.Data, want) {
		t.Fatalf("export of b = %s, want %s", resp.Msg.Data, want)
	}

	// An account with a password: its failed sign-ins, not its hash.
	const email, password = "cy@example.com", "correct horse 1"
	cr, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{Email: email, Password: password}, admin))
	if err != nil {
		t.Fatal(err)
	}
	c := cr.Msg.Account.Id
	_, err = e.auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "export", Email: email, Password: "wrong password"}))
	wantCode(t, err, connect.CodeUnauthenticated)
	resp, err = e.admin.ExportAccount(ctx, req(&ludusv1.ExportAccountRequest{Id: c}, admin))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(resp.Msg.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Throttle == nil || got.Throttle.Failures != 1 || !got.Throttle.LastFailure.Equal(e.clock.Now()) {
		t.Fatalf("export of c: sign-in throttle %+v", got.Throttle)
	}
	acc, err := e.store.AccountByID(ctx, tenant.Id, c)
	if err != nil {
		t.Fatal(err)
	}
	if acc.PasswordHash == "" || bytes.Contains(resp.Msg.Data, []byte(acc.PasswordHash)) || bytes.Contains(resp.Msg.Data, []byte("argon2")) {
		t.Fatalf("export of c carries the password hash: %s", resp.Msg.Data)
	}
	if want := oldExport(t, e.store, tenant.Id, c); !bytes.Equal(resp.Msg.Data, want) {
		t.Fatalf("export of c = %s, want %s", resp.Msg.Data, want)
	}
}

// What an export's new arrays hold, as the JSON names their fields.
type (
	exportBoard struct {
		Board   string `json:"board"`
		Best    int64  `json:"best"`
		Sum     int64  `json:"sum"`
		Matches int64  `json:"matches"`
	}
	exportRating struct {
		Mode       string    `json:"mode"`
		Rating     float64   `json:"rating"`
		RD         float64   `json:"rd"`
		Volatility float64   `json:"volatility"`
		Matches    int64     `json:"matches"`
		UpdatedAt  time.Time `json:"updated_at"`
	}
	exportSession struct {
		FirstTokenAt time.Time `json:"first_token_at"`
		LastTokenAt  time.Time `json:"last_token_at"`
		ExpiresAt    time.Time `json:"expires_at"`
		Revoked      bool      `json:"revoked"`
	}
	exportThrottle struct {
		Failures    int       `json:"failures"`
		LastFailure time.Time `json:"last_failure"`
		LockedUntil time.Time `json:"locked_until"`
	}
	exportUnfinishedMatch struct {
		MatchID   string             `json:"match_id"`
		Game      string             `json:"game"`
		CreatedAt time.Time          `json:"created_at"`
		Reported  store.PlayerReport `json:"reported"`
	}
	exportRosterEntry struct {
		MatchID string    `json:"match_id"`
		AddedAt time.Time `json:"added_at"`
	}
)

// oldExport builds an export the way ExportAccount did before it streamed
// (everything in memory, then json.MarshalIndent), without its row limits,
// with the keys exports gained since.
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
	// The keys exports gained since, read whole.
	type appliedChange struct {
		Key string    `json:"key"`
		At  time.Time `json:"at"`
	}
	var changes []appliedChange
	var boards []exportBoard
	var ratings []exportRating
	var sessions []exportSession
	var unfinished []exportUnfinishedMatch
	var rosters []exportRosterEntry
	var throttle *store.LoginThrottle
	if err := errors.Join(
		st.EachAppliedChange(ctx, tenantID, a.ID, func(c store.AppliedChange) error {
			changes = append(changes, appliedChange{c.Key, c.At})
			return nil
		}),
		st.EachAccountBoard(ctx, tenantID, a.ID, func(x store.AccountBoard) error {
			boards = append(boards, exportBoard{x.Board, x.Best, x.Sum, x.Matches})
			return nil
		}),
		st.EachAccountRating(ctx, tenantID, a.ID, func(r store.Rating) error {
			ratings = append(ratings, exportRating{r.Mode, r.Rating, r.RD, r.Volatility, r.Matches, r.UpdatedAt})
			return nil
		}),
		st.EachAccountSession(ctx, tenantID, a.ID, func(x store.AccountSession) error {
			sessions = append(sessions, exportSession{x.FirstTokenAt, x.LastTokenAt, x.ExpiresAt, x.Revoked})
			return nil
		}),
		st.EachUnfinishedAccountMatch(ctx, tenantID, a.ID, func(m store.AccountMatch) error {
			unfinished = append(unfinished, exportUnfinishedMatch{m.MatchID, m.Game, m.CreatedAt, m.Player})
			return nil
		}),
		st.EachAccountRosterEntry(ctx, tenantID, a.ID, func(r store.RosterEntry) error {
			rosters = append(rosters, exportRosterEntry{r.MatchID, r.AddedAt})
			return nil
		}),
	); err != nil {
		t.Fatal(err)
	}
	if a.Email != "" {
		th, err := st.LoginThrottle(ctx, tenantID, "email:"+a.Email)
		if err != nil {
			t.Fatal(err)
		}
		if th != (store.LoginThrottle{}) {
			throttle = &th
		}
	}
	var throttleJSON *exportThrottle
	if throttle != nil {
		throttleJSON = &exportThrottle{throttle.Failures, throttle.LastFailure, throttle.LockedUntil}
	}
	data, err := json.MarshalIndent(map[string]any{
		"account": map[string]any{"id": a.ID, "display_name": a.DisplayName, "device_id": a.DeviceID, "email": a.Email,
			"custom_id": a.CustomID, "has_password": a.PasswordHash != "", "created_at": a.CreatedAt, "updated_at": a.UpdatedAt},
		"progression":        p,
		"ledger":             ledger,
		"matches":            matches,
		"applied_changes":    changes,
		"leaderboards":       boards,
		"ratings":            ratings,
		"sessions":           sessions,
		"sign_in_throttle":   throttleJSON,
		"unfinished_matches": unfinished,
		"match_rosters":      rosters,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func clipBytes(b []byte) []byte { return b[:min(len(b), 80)] }
