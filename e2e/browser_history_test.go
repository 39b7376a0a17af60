package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// TestBrowserHistory: a signed-in player plays a real match in headless
// Chromium and finds it on the profile's "Recent matches" as the API tells it
// (ProgressionService.ListMyMatches), with the other player by name; the
// leaderboard names both players and marks the caller's row; the table reads on
// a 360 px phone (web/e2e/history.mjs). A studio of its own keeps the
// leaderboard to this test's two players. Screenshots: artifacts/history-*.png.
func TestBrowserHistory(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hc := http.DefaultClient
	op := ludusv1connect.NewAdminServiceClient(hc, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	slug := fmt.Sprintf("history-%d", time.Now().UnixNano()%1_000_000_000)
	created, err := op.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: slug, Name: "History Studio"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	studio := ludusv1connect.NewAdminServiceClient(hc, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)), connect.WithSendMaxBytes(64<<20))
	if _, err := studio.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: arenaWasm()})); err != nil {
		t.Fatal(err)
	}

	// The browser's player signs in with an email; the other plays from Go.
	auth := ludusv1connect.NewAuthServiceClient(hc, stack.GatewayURL)
	email, password := fmt.Sprintf("hera-%s@example.com", slug), "wine-dark sea 8"
	reg, err := auth.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: slug, Email: email, Password: password, DisplayName: "Hera"}))
	if err != nil {
		t.Fatal(err)
	}
	hera := reg.Msg.Session.AccountId
	g, err := auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: slug, DeviceId: "device-ares-" + slug, DisplayName: "Ares"}))
	if err != nil {
		t.Fatal(err)
	}
	aresTicket := g.Msg.Ticket
	ares := ludusv1connect.NewGameServiceClient(hc, stack.GatewayURL, connect.WithInterceptors(withTicket(&aresTicket)))

	// The password goes in the environment, not the arguments.
	s := startBrowserScript(t, ctx, chromium, "history.mjs",
		[]string{"LUDUS_TENANT=" + slug, "LUDUS_EMAIL=" + email, "LUDUS_PASSWORD=" + password, "LUDUS_ACCOUNT=" + hera},
		stack.GatewayURL+"/", artifacts)
	stdin := s.stdin
	var out []string
	var row struct {
		Match string   `json:"match"`
		Cells []string `json:"cells"`
	}
	var board []struct {
		Me     bool   `json:"me"`
		Player string `json:"player"`
		Title  string `json:"title"`
	}
	gameID := ""
	played := make(chan error, 1)
	sc := bufio.NewScanner(s.stdout)
	for sc.Scan() {
		line := sc.Text()
		out = append(out, line)
		switch {
		case line == "READY":
			// A short match (the arena's time limit) with two bots, which Ares
			// plays to its end while the browser joins it.
			cg, err := ares.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2, Config: []byte(`{"time_limit_s":15}`)}))
			if err != nil {
				fmt.Fprintf(stdin, "failed %v\n", err)
				t.Errorf("create game: %v", err)
				continue
			}
			id := cg.Msg.Game.GameId
			if _, err := ares.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
				fmt.Fprintf(stdin, "failed %v\n", err)
				t.Errorf("join game: %v", err)
				continue
			}
			gameID = id
			go func() { played <- playToEnd(ctx, ares, id) }()
			fmt.Fprintf(stdin, "GAME %s\n", gameID)
		case strings.HasPrefix(line, "ROW "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "ROW ")), &row); err != nil {
				t.Errorf("row %q: %v", line, err)
			}
		case strings.HasPrefix(line, "BOARD "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "BOARD ")), &board); err != nil {
				t.Errorf("board %q: %v", line, err)
			}
		}
	}
	err = s.cmd.Wait()
	t.Logf("%s\n%s", strings.Join(out, "\n"), s.stderr.String())
	if err != nil {
		t.Fatalf("history e2e failed: %v", err)
	}
	if gameID == "" {
		t.Fatal("the browser never asked for its game")
	}
	if err := <-played; err != nil {
		t.Errorf("Ares's stream: %v", err)
	}

	// The row shows what the API says about the match.
	login, err := auth.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: slug, Email: email, Password: password}))
	if err != nil {
		t.Fatal(err)
	}
	ticket := login.Msg.Session.Ticket
	prog := ludusv1connect.NewProgressionServiceClient(hc, stack.GatewayURL, connect.WithInterceptors(withTicket(&ticket)))
	mine, err := prog.ListMyMatches(ctx, connect.NewRequest(&ludusv1.ListMyMatchesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Msg.Matches) != 1 || mine.Msg.Matches[0].MatchId != gameID {
		t.Fatalf("Hera's matches = %v, want the one game %s", mine.Msg.Matches, gameID)
	}
	m := mine.Msg.Matches[0]
	if len(m.Others) != 1 || m.Others[0].DisplayName != "Ares" {
		t.Fatalf("the match's other players = %v, want Ares", m.Others)
	}
	// ended, game, result, score, players, played, match
	if row.Match != gameID || len(row.Cells) != 7 {
		t.Fatalf("the page's row = %+v, want 7 cells of %s", row, gameID)
	}
	if row.Cells[0] == "" || row.Cells[0] == "—" {
		t.Errorf("the row has no end time: %q", row.Cells)
	}
	want := []string{"arena", outcomeWords(m), fmt.Sprint(m.You.Score), fmt.Sprintf("Ares %d", m.Others[0].Score)}
	for i, w := range want {
		if row.Cells[i+1] != w {
			t.Errorf("cell %d = %q, want %q (row %q)", i+1, row.Cells[i+1], w, row.Cells)
		}
	}

	// The leaderboard: both players by name, Hera's row marked.
	if len(board) != 2 {
		t.Fatalf("leaderboard rows = %+v, want Hera and Ares", board)
	}
	for _, r := range board {
		switch r.Title {
		case hera:
			if !r.Me || r.Player != "Hera (you)" {
				t.Errorf("Hera's row = %+v, want marked and named", r)
			}
		case g.Msg.AccountId:
			if r.Me || r.Player != "Ares" {
				t.Errorf("Ares's row = %+v", r)
			}
		default:
			t.Errorf("a leaderboard row of another account: %+v", r)
		}
	}
	for _, name := range []string{"history-profile.png", "history-leaderboard.png", "history-phone.png"} {
		if st, err := os.Stat(filepath.Join(artifacts, name)); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot %s", name)
		}
	}
}

// playToEnd streams a game's frames until its last status, as a player does.
func playToEnd(ctx context.Context, games ludusv1connect.GameServiceClient, gameID string) error {
	s, err := games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: gameID}))
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
		if st := s.Msg().GetStatus(); st != nil && (st.State == "ended" || st.State == "failed") {
			if st.State == "failed" {
				return fmt.Errorf("the game failed: %s", st.Message)
			}
			return nil
		}
	}
	return fmt.Errorf("the stream ended before the game: %v", s.Err())
}

// outcomeWords is what the page's result column says (web/src/history.ts).
func outcomeWords(m *ludusv1.MyMatch) string {
	switch m.Outcome {
	case ludusv1.MatchOutcome_MATCH_OUTCOME_WON:
		return "won"
	case ludusv1.MatchOutcome_MATCH_OUTCOME_DRAW:
		return "draw"
	case ludusv1.MatchOutcome_MATCH_OUTCOME_LOST:
		p := m.You.Place
		suffix := "th"
		if p%100 < 11 || p%100 > 13 {
			suffix = map[int32]string{1: "st", 2: "nd", 3: "rd"}[p%10]
			if suffix == "" {
				suffix = "th"
			}
		}
		return fmt.Sprintf("lost · %d%s", p, suffix)
	}
	return "—"
}
