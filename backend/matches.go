package backend

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/sdk/abi"
)

// MatchCredentialPrefix starts every match-scoped credential.
const MatchCredentialPrefix = "lmc_"

// MatchCredentialTTL bounds a match credential's life even if the match
// never reports a final result: a day past the longest game a module may
// declare (abi.MaxDurationLimitS, seven days), so that a long game's last
// reports and its result still count.
const MatchCredentialTTL = abi.MaxDurationLimitS*time.Second + 24*time.Hour

// MintMatchCredential registers a match of a tenant's game and returns the
// credential its sim node reports with. It is what the cluster RPC of the
// same name does; in-process callers (ludus dev) may call it directly.
func (s *Server) MintMatchCredential(ctx context.Context, tenantID, matchID, game string) (credential string, expiresAt time.Time, err error) {
	if err := checkTenantID(tenantID); err != nil {
		return "", time.Time{}, invalidArg(err)
	}
	if err := checkMatchID(matchID); err != nil {
		return "", time.Time{}, invalidArg(err)
	}
	if err := checkModuleName(game); err != nil {
		return "", time.Time{}, invalidArg(fmt.Errorf("game: %w", err))
	}
	cred, hash := newSecret(MatchCredentialPrefix)
	now := s.now().UTC()
	m := store.Match{TenantID: tenantID, ID: matchID, Game: game, CredentialHash: hash, CreatedAt: now, ExpiresAt: now.Add(MatchCredentialTTL)}
	switch err := s.store.CreateMatch(ctx, m); {
	case errors.Is(err, store.ErrAlreadyExists):
		return "", time.Time{}, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("match %q already has a credential", matchID))
	case errors.Is(err, store.ErrNotFound):
		return "", time.Time{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown tenant %q", tenantID))
	case err != nil:
		return "", time.Time{}, s.internal(ctx, "mint match credential", err)
	}
	return cred, m.ExpiresAt, nil
}

// MintMatchCredential implements the cluster RPC (cluster token only: a
// node credential gets PermissionDenied).
func (s *moduleStore) MintMatchCredential(ctx context.Context, req *connect.Request[clusterv1.MintMatchCredentialRequest]) (*connect.Response[clusterv1.MintMatchCredentialResponse], error) {
	if _, err := s.cluster(req.Header(), "MintMatchCredential", clusterOnly); err != nil {
		return nil, err
	}
	cred, exp, err := s.Server.MintMatchCredential(ctx, req.Msg.TenantId, req.Msg.MatchId, req.Msg.Game)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterv1.MintMatchCredentialResponse{Credential: cred, ExpiresAt: timestamppb.New(exp)}), nil
}

// AddMatchPlayers puts accounts of the tenant on the roster of a match (see
// MintMatchCredential): once a match has a roster, or always with
// Config.RequireRoster, its reports may credit only the accounts on it. It is
// what the cluster RPC of the same name does; in-process callers may call it
// directly. Adding an account again does nothing.
func (s *Server) AddMatchPlayers(ctx context.Context, tenantID, matchID string, accountIDs []string) error {
	if err := checkTenantID(tenantID); err != nil {
		return invalidArg(err)
	}
	if err := checkMatchID(matchID); err != nil {
		return invalidArg(err)
	}
	if len(accountIDs) == 0 || len(accountIDs) > MaxPlayers {
		return invalidArg(fmt.Errorf("account_ids must name 1..%d accounts, got %d", MaxPlayers, len(accountIDs)))
	}
	seen := make(map[string]bool, len(accountIDs))
	for i, id := range accountIDs {
		if err := checkAccountID(fmt.Sprintf("account_ids[%d]", i), id); err != nil {
			return invalidArg(err)
		}
		if seen[id] {
			return invalidArg(fmt.Errorf("account_ids[%d]: account %s appears twice", i, id))
		}
		seen[id] = true
	}
	switch err := s.store.AddMatchPlayers(ctx, tenantID, matchID, accountIDs, s.now().UTC()); {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound,
			fmt.Errorf("tenant %q has no match %q, or one of the accounts is not the tenant's: mint the match's credential first", tenantID, matchID))
	case errors.Is(err, store.ErrMatchEnded):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("match %q has ended: its final result is stored", matchID))
	case err != nil:
		return s.internal(ctx, "add match players", err)
	}
	return nil
}

// AddMatchPlayers implements the cluster RPC (cluster token only: a node
// credential gets PermissionDenied, or a node could put anyone on a roster).
func (s *moduleStore) AddMatchPlayers(ctx context.Context, req *connect.Request[clusterv1.AddMatchPlayersRequest]) (*connect.Response[clusterv1.AddMatchPlayersResponse], error) {
	if _, err := s.cluster(req.Header(), "AddMatchPlayers", clusterOnly); err != nil {
		return nil, err
	}
	if err := s.Server.AddMatchPlayers(ctx, req.Msg.TenantId, req.Msg.MatchId, req.Msg.AccountIds); err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterv1.AddMatchPlayersResponse{}), nil
}

// RosterClient registers the players of matches with the backend
// (ModuleStoreService.AddMatchPlayers); a gateway makes one.
type RosterClient struct {
	client clusterv1connect.ModuleStoreServiceClient
	token  string
}

// NewRosterClient returns a client of the backend at baseURL (e.g.
// "http://127.0.0.1:7100") presenting the cluster token (a node credential
// may not register players).
func NewRosterClient(hc connect.HTTPClient, baseURL, clusterToken string) *RosterClient {
	return &RosterClient{client: clusterv1connect.NewModuleStoreServiceClient(hc, baseURL), token: clusterToken}
}

// AddPlayers puts accounts of the tenant on the roster of a match, retrying
// with backoff (50 ms doubling to 10 s) on errors worth retrying until ctx
// ends: bound ctx by what the caller (a player's JoinGame) may wait.
// Retrying is safe: adding an account twice does nothing.
func (c *RosterClient) AddPlayers(ctx context.Context, tenantID, matchID string, accountIDs ...string) error {
	return retryUnary(ctx, 50*time.Millisecond, func() error {
		r := connect.NewRequest(&clusterv1.AddMatchPlayersRequest{TenantId: tenantID, MatchId: matchID, AccountIds: accountIDs})
		r.Header().Set("Authorization", "Bearer "+c.token)
		_, err := c.client.AddMatchPlayers(ctx, r)
		return err
	})
}

// matchReports implements ludus.v1.MatchReportService.
type matchReports struct{ *Server }

// matchOf authenticates a match credential for matchID.
func (s *matchReports) matchOf(ctx context.Context, h http.Header, matchID string) (store.Match, error) {
	cred, ok := bearer.FromHeader(h)
	if !ok {
		return store.Match{}, connect.NewError(connect.CodeUnauthenticated, errors.New(`missing match credential: send "Authorization: Bearer <credential>"`))
	}
	bad := connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or expired match credential"))
	if !strings.HasPrefix(cred, MatchCredentialPrefix) || len(cred) > 128 {
		return store.Match{}, bad
	}
	m, err := s.store.MatchByCredential(ctx, hashSecret(cred))
	if errors.Is(err, store.ErrNotFound) {
		return store.Match{}, bad
	} else if err != nil {
		return store.Match{}, s.internal(ctx, "match credential", err)
	}
	if m.ID != matchID {
		return store.Match{}, connect.NewError(connect.CodePermissionDenied, errors.New("this credential reports another match"))
	}
	if !s.now().Before(m.ExpiresAt) {
		return store.Match{}, bad
	}
	return m, nil
}

// checkRoster refuses a report of m that credits an account not on m's
// roster, if m has a roster or Config.RequireRoster is set: a match
// credential must not credit whoever its holder names. Nothing of a refused
// report is applied.
func (s *matchReports) checkRoster(ctx context.Context, m store.Match, players []store.PlayerReport) error {
	if len(players) == 0 {
		return nil
	}
	roster, err := s.store.MatchRoster(ctx, m.TenantID, m.ID)
	if err != nil {
		return s.internal(ctx, "match roster", err)
	}
	if len(roster) == 0 && !s.requireRoster {
		return nil // a match no gateway registered players of (before rosters)
	}
	on := make(map[string]bool, len(roster))
	for _, id := range roster {
		on[id] = true
	}
	for _, p := range players {
		if !on[p.AccountID] {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("account %s is not a player of match %q (not on its roster): nothing of this report was applied", p.AccountID, m.ID))
		}
	}
	return nil
}

func playersOf(ps []*ludusv1.PlayerResult) ([]store.PlayerReport, error) {
	if len(ps) > MaxPlayers {
		return nil, fmt.Errorf("at most %d players", MaxPlayers)
	}
	seen := map[string]bool{}
	out := make([]store.PlayerReport, 0, len(ps))
	for i, p := range ps {
		if err := checkAccountID(fmt.Sprintf("players[%d].account_id", i), p.AccountId); err != nil {
			return nil, err
		}
		if seen[p.AccountId] {
			return nil, fmt.Errorf("players[%d]: account %s appears twice", i, p.AccountId)
		}
		seen[p.AccountId] = true
		for _, v := range []int64{p.Score, p.DurationMs, p.Damage, p.Xp} {
			if v < -MaxDelta || v > MaxDelta {
				return nil, fmt.Errorf("players[%d]: a value is out of range", i)
			}
		}
		if p.Xp < 0 {
			return nil, fmt.Errorf("players[%d].xp must not be negative", i)
		}
		for name, m := range map[string]map[string]int64{"items_used": p.ItemsUsed, "currency": p.Currency, "items": p.Items} {
			if err := checkAmounts(fmt.Sprintf("players[%d].%s", i, name), m, false); err != nil {
				return nil, err
			}
		}
		if err := checkStats(fmt.Sprintf("players[%d].stats", i), p.Stats); err != nil {
			return nil, err
		}
		if p.Place < 0 || p.Place > MaxPlace || p.Team < 0 || p.Team > MaxPlace {
			return nil, fmt.Errorf("players[%d]: place and team must be 0..%d", i, MaxPlace)
		}
		out = append(out, store.PlayerReport{AccountID: p.AccountId, Score: p.Score, DurationMs: p.DurationMs, Damage: p.Damage,
			ItemsUsed: p.ItemsUsed, XP: p.Xp, Currency: p.Currency, Items: p.Items, Stats: p.Stats, Place: int(p.Place), Team: int(p.Team)})
	}
	return out, nil
}

// ReportProgress applies an interim cumulative report.
func (s *matchReports) ReportProgress(ctx context.Context, req *connect.Request[ludusv1.ReportProgressRequest]) (*connect.Response[ludusv1.ReportProgressResponse], error) {
	if err := checkMatchID(req.Msg.MatchId); err != nil {
		return nil, invalidArg(err)
	}
	m, err := s.matchOf(ctx, req.Header(), req.Msg.MatchId)
	if err != nil {
		return nil, err
	}
	if req.Msg.Seq < 1 {
		return nil, invalidArg(errors.New("seq must be 1 or more"))
	}
	players, err := playersOf(req.Msg.Players)
	if err != nil {
		return nil, invalidArg(err)
	}
	if err := s.checkRoster(ctx, m, players); err != nil {
		return nil, err
	}
	if _, err := s.withRules(ctx, m, false, players); err != nil {
		return nil, err
	}
	var skipped []store.SkippedGrant
	applied, err := s.store.ApplyMatchReport(ctx, store.MatchReport{TenantID: m.TenantID, MatchID: m.ID, Seq: req.Msg.Seq, Players: players,
		At: s.now().UTC(), Skipped: &skipped})
	if errors.Is(err, store.ErrMatchEnded) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the match has ended: its final result is stored"))
	} else if err != nil {
		return nil, s.internal(ctx, "report progress", err)
	}
	s.logSkipped(ctx, m, skipped)
	return connect.NewResponse(&ludusv1.ReportProgressResponse{Applied: applied}), nil
}

// maxSkippedLogged bounds the grants one log line names.
const maxSkippedLogged = 32

// logSkipped logs the grants a report of m left out because the accounts
// hold as many distinct currencies or items as they may (the report itself
// applied): the operator and the studio find them in the log, and the
// stored result shows what the match did grant.
func (s *matchReports) logSkipped(ctx context.Context, m store.Match, skipped []store.SkippedGrant) {
	if len(skipped) == 0 {
		return
	}
	var b strings.Builder
	for i, g := range skipped {
		if i == maxSkippedLogged {
			fmt.Fprintf(&b, " and %d more", len(skipped)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s %s +%d", g.AccountID, g.Kind, g.Name, g.Amount)
	}
	s.log.WarnContext(ctx, "backend: match report left out grants past the accounts' caps on distinct currencies and items",
		"tenant", m.TenantID, "match", m.ID, "skipped", len(skipped), "grants", b.String(),
		"max_currencies", store.MaxCurrenciesPerAccount, "max_items", store.MaxItemsPerAccount)
}

// WebhookEvent is the body POSTed to a tenant's webhook.
type WebhookEvent struct {
	ID       string          `json:"id"` // also the Ludus-Idempotency-Key header
	Event    string          `json:"event"`
	TenantID string          `json:"tenant_id"`
	MatchID  string          `json:"match_id"`
	Game     string          `json:"game"`
	EndedAt  time.Time       `json:"ended_at"`
	Players  []WebhookPlayer `json:"players"`
}

// WebhookPlayer is a player's result in a WebhookEvent.
type WebhookPlayer struct {
	AccountID  string           `json:"account_id"`
	Score      int64            `json:"score"`
	DurationMs int64            `json:"duration_ms"`
	Damage     int64            `json:"damage"`
	ItemsUsed  map[string]int64 `json:"items_used,omitempty"`
	XP         int64            `json:"xp"`
	Currency   map[string]int64 `json:"currency,omitempty"`
	Items      map[string]int64 `json:"items,omitempty"`
	// Stats are the module's per-player integer fields (kills, coins, ...).
	Stats map[string]int64 `json:"stats,omitempty"`
	// Place is where the player finished (1 won), 0 if not known; Team
	// the player's team, 0 if none.
	Place int `json:"place,omitempty"`
	Team  int `json:"team,omitempty"`
}

// withRules credits what the tenant's result rules make of the players'
// stats (into their XP, currency and items totals) and, for a final report,
// returns the stat leaderboard entries.
func (s *matchReports) withRules(ctx context.Context, m store.Match, final bool, players []store.PlayerReport) ([]store.BoardEntry, error) {
	rules, err := s.resultRules(ctx, m.TenantID)
	if err != nil {
		return nil, s.internal(ctx, "result rules", err)
	}
	boards, err := applyRules(rules, m.Game, final, players)
	if err != nil {
		return nil, invalidArg(err)
	}
	return boards, nil
}

// ReportMatchResult applies the final report exactly once.
func (s *matchReports) ReportMatchResult(ctx context.Context, req *connect.Request[ludusv1.ReportMatchResultRequest]) (*connect.Response[ludusv1.ReportMatchResultResponse], error) {
	if err := checkMatchID(req.Msg.MatchId); err != nil {
		return nil, invalidArg(err)
	}
	m, err := s.matchOf(ctx, req.Header(), req.Msg.MatchId)
	if err != nil {
		return nil, err
	}
	if req.Msg.Seq < 0 {
		return nil, invalidArg(errors.New("seq must not be negative"))
	}
	players, err := playersOf(req.Msg.Players)
	if err != nil {
		return nil, invalidArg(err)
	}
	if err := s.checkRoster(ctx, m, players); err != nil {
		return nil, err
	}
	boards, err := s.withRules(ctx, m, true, players)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var skipped []store.SkippedGrant
	r := store.MatchReport{TenantID: m.TenantID, MatchID: m.ID, Seq: req.Msg.Seq, Final: true, Players: players, At: now,
		Boards: boards, Rating: ratingUpdate(m.Game, players), Skipped: &skipped}
	if _, err := s.store.Webhook(ctx, m.TenantID); err == nil {
		ev := WebhookEvent{ID: newID("d_"), Event: "match.result", TenantID: m.TenantID, MatchID: m.ID, Game: m.Game, EndedAt: now}
		for _, p := range players {
			ev.Players = append(ev.Players, WebhookPlayer(p))
		}
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, s.internal(ctx, "webhook payload", err)
		}
		r.Webhook = &store.WebhookDelivery{ID: ev.ID, TenantID: m.TenantID, Event: ev.Event, Payload: body, State: store.DeliveryPending,
			NextAt: now, CreatedAt: now, UpdatedAt: now}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, s.internal(ctx, "webhook", err)
	}
	applied, err := s.store.ApplyMatchReport(ctx, r)
	if err != nil {
		return nil, s.internal(ctx, "report match result", err)
	}
	if applied {
		s.log.InfoContext(ctx, "backend: match result stored", "tenant", m.TenantID, "match", m.ID, "players", len(players))
	}
	s.logSkipped(ctx, m, skipped)
	return connect.NewResponse(&ludusv1.ReportMatchResultResponse{Applied: applied}), nil
}

// progressionService implements ludus.v1.ProgressionService (players).
type progressionService struct{ *Server }

// GetProgression returns the caller's progression.
func (s *progressionService) GetProgression(ctx context.Context, req *connect.Request[ludusv1.GetProgressionRequest]) (*connect.Response[ludusv1.GetProgressionResponse], error) {
	c, err := s.player(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := s.store.Progression(ctx, c.TenantID, c.AccountID)
	if err != nil {
		return nil, s.internal(ctx, "progression", err)
	}
	return connect.NewResponse(&ludusv1.GetProgressionResponse{Progression: progressionProto(p)}), nil
}

// GetLeaderboard returns a game's leaderboard of the caller's tenant.
func (s *progressionService) GetLeaderboard(ctx context.Context, req *connect.Request[ludusv1.GetLeaderboardRequest]) (*connect.Response[ludusv1.GetLeaderboardResponse], error) {
	c, err := s.player(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := s.leaderboardReadAllowed(c.TenantID, c.AccountID); err != nil {
		return nil, err
	}
	around := ""
	if req.Msg.AroundMe {
		around = c.AccountID
	}
	es, err := s.leaderboard(ctx, c.TenantID, req.Msg.Query, around)
	if err != nil {
		return nil, err
	}
	if err := s.nameEntries(ctx, c.TenantID, es); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GetLeaderboardResponse{Entries: es}), nil
}

// MatchReporter reports one match's progress and result to the backend with
// its match-scoped credential. A sim node makes one per match.
type MatchReporter struct {
	client  ludusv1connect.MatchReportServiceClient
	matchID string
	cred    string
}

// NewMatchReporter returns a reporter for matchID talking to the backend at
// baseURL (e.g. "http://127.0.0.1:7100").
func NewMatchReporter(hc connect.HTTPClient, baseURL, matchID, credential string) *MatchReporter {
	return &MatchReporter{client: ludusv1connect.NewMatchReportServiceClient(hc, baseURL), matchID: matchID, cred: credential}
}

func (r *MatchReporter) auth(h http.Header) { h.Set("Authorization", "Bearer "+r.cred) }

// ReportProgress sends interim cumulative totals with sequence seq (use a
// number that grows over the match even across failover, e.g. the tick).
// It does not retry: the next report supersedes a lost one.
func (r *MatchReporter) ReportProgress(ctx context.Context, seq int64, players []*ludusv1.PlayerResult) (applied bool, err error) {
	req := connect.NewRequest(&ludusv1.ReportProgressRequest{MatchId: r.matchID, Seq: seq, Players: players})
	r.auth(req.Header())
	resp, err := r.client.ReportProgress(ctx, req)
	if err != nil {
		return false, err
	}
	return resp.Msg.Applied, nil
}

// ReportResult sends the final result, retrying with backoff (100 ms doubling
// to 10 s) on errors worth retrying until ctx ends. Retrying is safe: the
// backend applies a match's result once. applied is false if it had been
// stored before.
func (r *MatchReporter) ReportResult(ctx context.Context, seq int64, players []*ludusv1.PlayerResult) (applied bool, err error) {
	delay := 100 * time.Millisecond
	for {
		req := connect.NewRequest(&ludusv1.ReportMatchResultRequest{MatchId: r.matchID, Seq: seq, Players: players})
		r.auth(req.Header())
		resp, err := r.client.ReportMatchResult(ctx, req)
		if err == nil {
			return resp.Msg.Applied, nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeAborted, connect.CodeResourceExhausted:
		default:
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, errors.Join(ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// Webhook delivery.

// Webhook delivery tuning.
const (
	WebhookMaxAttempts = 12
	webhookLease       = 60 * time.Second
	webhookBatch       = 16
)

// webhookBackoff is the wait after the n-th failed attempt: 2 s, 4 s, ... up
// to an hour.
func webhookBackoff(n int) time.Duration {
	return min(2*time.Second<<min(n-1, 12), time.Hour)
}

// SignWebhook returns the Ludus-Signature header of body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>". Receivers
// recompute it, compare in constant time, and reject old timestamps.
func SignWebhook(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// DeliverWebhooks makes one pass over due webhook deliveries and returns how
// many it attempted. Each delivery is leased in the store first, so several
// backend replicas can run it; a delivery whose outcome was not recorded
// (crash) is attempted again after its lease: at least once, with the same
// Ludus-Idempotency-Key.
func (s *Server) DeliverWebhooks(ctx context.Context) (int, error) {
	now := s.now().UTC()
	due, err := s.store.DueDeliveries(ctx, now, now.Add(webhookLease), webhookBatch)
	if err != nil {
		return 0, err
	}
	for _, d := range due {
		d.Attempts++
		d.UpdatedAt = s.now().UTC()
		w, err := s.store.Webhook(ctx, d.TenantID)
		switch {
		case err == nil && w.URL != "":
			err = s.postWebhook(ctx, w, d)
		case err == nil, errors.Is(err, store.ErrNotFound):
			err = errors.New("delivery failed: no webhook configured")
		default:
			s.log.ErrorContext(ctx, "backend: webhook", "tenant", d.TenantID, "err", err)
			err = errors.New("delivery failed: internal error")
		}
		switch {
		case err == nil:
			d.State, d.LastError = store.DeliveryDelivered, ""
		case d.Attempts >= WebhookMaxAttempts:
			d.State, d.LastError = store.DeliveryFailed, clipMessage(err.Error())
		default:
			d.LastError = clipMessage(err.Error())
			d.NextAt = d.UpdatedAt.Add(webhookBackoff(d.Attempts))
		}
		if err := s.store.UpdateDelivery(ctx, d); err != nil {
			return len(due), err
		}
	}
	return len(due), nil
}

// postWebhook makes one delivery attempt. Its error is what the tenant sees
// (ListWebhookDeliveries): generic, never a dial error, address or port
// (those go to the log).
func (s *Server) postWebhook(ctx context.Context, w store.Webhook, d store.WebhookDelivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return errDeliveryBadURL
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ludus-webhooks/1")
	req.Header.Set("Ludus-Event", d.Event)
	req.Header.Set("Ludus-Idempotency-Key", d.ID)
	req.Header.Set("Ludus-Signature", SignWebhook(w.Secret, s.now(), d.Payload))
	resp, err := s.webhookClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.WarnContext(ctx, "backend: webhook delivery attempt failed", "tenant", d.TenantID, "delivery", d.ID, "err", err)
		if errors.Is(err, errNonPublicAddr) {
			return errDeliveryNonPublic
		}
		return errDeliveryUnreachable
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		return fmt.Errorf("delivery failed: the endpoint answered HTTP %d, not 2xx (redirects are not followed)", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("delivery failed: the endpoint answered HTTP %d, not 2xx", resp.StatusCode)
	}
	return nil
}

// RunWebhooks delivers webhooks until ctx ends, polling every interval
// (1 s if zero).
func (s *Server) RunWebhooks(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := s.DeliverWebhooks(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "backend: webhook deliveries", "err", err)
			}
			if err != nil || n < webhookBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// GetRatings implements the cluster RPC (cluster token only): the matchmaker
// reads players' ratings in a mode; an account never rated is left out.
func (s *moduleStore) GetRatings(ctx context.Context, req *connect.Request[clusterv1.GetRatingsRequest]) (*connect.Response[clusterv1.GetRatingsResponse], error) {
	if _, err := s.cluster(req.Header(), "GetRatings", clusterOnly); err != nil {
		return nil, err
	}
	m := req.Msg
	if m.TenantId == "" || m.Mode == "" || len(m.Mode) > 64 {
		return nil, invalidArg(errors.New("tenant_id and mode (1..64 characters) are required"))
	}
	if len(m.AccountIds) == 0 || len(m.AccountIds) > MaxPlayers {
		return nil, invalidArg(fmt.Errorf("account_ids must name 1..%d accounts, got %d", MaxPlayers, len(m.AccountIds)))
	}
	got, err := s.store.Ratings(ctx, m.TenantId, m.Mode, m.AccountIds)
	if err != nil {
		return nil, s.internal(ctx, "ratings", err)
	}
	resp := &clusterv1.GetRatingsResponse{}
	for _, id := range m.AccountIds {
		if r, ok := got[id]; ok {
			resp.Ratings = append(resp.Ratings, &clusterv1.PlayerRating{AccountId: id, Rating: r.Rating, Rd: r.RD, Volatility: r.Volatility, Matches: r.Matches})
		}
	}
	return connect.NewResponse(resp), nil
}
