package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"ludus.dev/ludus/internal/bearer"
	"net/http"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// FailoverResult is what a kill -9 of one sim node did to the games it ran.
// Field names are read by tools (`ludus bench failover -json`): keep them.
type FailoverResult struct {
	Games           int     `json:"games"`
	VictimGames     int     `json:"victim_games"`
	LeaseTTLms      int64   `json:"lease_ttl_ms"`
	TakeoverMsP50   float64 `json:"takeover_ms_p50"`
	TakeoverMsP99   float64 `json:"takeover_ms_p99"`
	AckedInputs     int     `json:"acked_inputs"`
	AckedInputsLost int     `json:"acked_inputs_lost"`
	InputsDoubled   int     `json:"inputs_applied_twice"`
	GamesLost       int     `json:"games_lost"`
	HashesChecked   int     `json:"state_hashes_checked"`
	ReplayMismatch  int     `json:"replay_mismatches"`
	// HandoffPauseMsP99: the longest gap between two frames a player saw around
	// a handoff of its game (p99 over the handed-off games).
	HandoffPauseMsP99 float64 `json:"handoff_pause_ms_p99"`
	Handoffs          int     `json:"handoffs"`
	// ReplayMsPerMinOfPlay: time to rebuild a game from its full log, per minute
	// of play it holds (no checkpoint used).
	ReplayMsPerMinOfPlay float64 `json:"replay_ms_per_min_of_play"`
	// EtcdWritesPerGameSec: etcd revisions (one per transaction) per running
	// game per second of steady play, with players sending inputs.
	EtcdWritesPerGameSec float64 `json:"etcd_writes_per_game_sec"`
	// SpectatorDelayMsP99: how far behind the player's own view the spectator
	// stream (served by a replica node) runs.
	SpectatorDelayMsP99 float64 `json:"spectator_delay_ms_p99"`
}

// player is a scripted client of one game: it streams frames (re-opening the
// stream whenever it ends, as a client does) and sends an input every 100 ms,
// re-sending an input until it is acknowledged.
type player struct {
	game     string
	ticket   string
	client   ludusv1connect.GameServiceClient
	mu       sync.Mutex
	acked    map[uint64]bool
	frames   []frameSeen
	nodeNow  string
	lastTick int64
}

type frameSeen struct {
	at   time.Time
	node string
}

// RunFailover creates games (each with bots and one scripted player), lets them
// play for warmup, kills -9 the sim node running the most games, and measures,
// per game of that node, the time from the kill to the first frame its player
// receives from the new owner. Then it checks every acknowledged input is in
// the game's log exactly once and that a full replay of each log reproduces
// every recorded state hash.
func RunFailover(ctx context.Context, c *Cluster, eng *engine.Engine, module []byte, games int, warmup time.Duration) (FailoverResult, error) {
	res := FailoverResult{Games: games, LeaseTTLms: c.cfg.LeaseTTL.Milliseconds()}
	auth := ludusv1connect.NewAuthServiceClient(http.DefaultClient, c.GatewayURL)
	players := make([]*player, games)
	byNode := map[string][]*player{}
	for i := range players {
		dev := make([]byte, 12)
		_, _ = rand.Read(dev)
		l, err := auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: fmt.Sprintf("failover-%x", dev)}))
		if err != nil {
			return res, fmt.Errorf("login: %w", err)
		}
		p := &player{ticket: l.Msg.Ticket, acked: map[uint64]bool{}}
		p.client = ludusv1connect.NewGameServiceClient(http.DefaultClient, c.GatewayURL, connect.WithInterceptors(bearer.Token(p.ticket)))
		// Limits far away: the games must outlive the test.
		g, err := p.client.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 3,
			Config: []byte(`{"score_limit":10000,"time_limit_s":3600}`)}))
		if err != nil {
			return res, fmt.Errorf("create game %d: %w", i, err)
		}
		p.game = g.Msg.Game.GameId
		if _, err := p.client.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: p.game})); err != nil {
			return res, fmt.Errorf("join: %w", err)
		}
		players[i] = p
		byNode[g.Msg.Game.NodeId] = append(byNode[g.Msg.Game.NodeId], p)
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range players {
		wg.Add(2)
		go func() { defer wg.Done(); p.stream(pctx) }()
		go func() { defer wg.Done(); p.play(pctx) }()
	}
	// Spectators of the first few games, through the gateway (a replica node),
	// during steady play (until the handoffs start).
	var specDelays []float64
	var specMu sync.Mutex
	sctx, stopSpectators := context.WithCancel(pctx)
	defer stopSpectators()
	for i, p := range players {
		if i >= 5 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := p.spectate(sctx)
			specMu.Lock()
			specDelays = append(specDelays, d...)
			specMu.Unlock()
		}()
	}
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return res, ctx.Err()
	}
	// Steady play: etcd writes per game-second.
	r0, err := c.Etcd.Get(ctx, "/ludus/none")
	if err != nil {
		stop()
		wg.Wait()
		return res, err
	}
	window := 2 * time.Second
	time.Sleep(window)
	r1, err := c.Etcd.Get(ctx, "/ludus/none")
	if err != nil {
		stop()
		wg.Wait()
		return res, err
	}
	res.EtcdWritesPerGameSec = float64(r1.Header.Revision-r0.Header.Revision) / float64(games) / window.Seconds()
	stopSpectators()

	// Handoffs: move up to 10 games and measure the pause their players see.
	fleetc := ludusv1connect.NewFleetServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.OperatorKey)))
	var pauses []float64
	for i, p := range players {
		if i >= 10 {
			break
		}
		at := time.Now()
		if _, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: c.TenantID, GameId: p.game})); err != nil {
			continue
		}
		res.Handoffs++
		time.Sleep(1500 * time.Millisecond)
		pauses = append(pauses, p.longestGap(at.Add(-200*time.Millisecond), time.Now()))
	}
	sort.Float64s(pauses)
	res.HandoffPauseMsP99 = percentile(pauses, 0.99)
	// Games moved: find where each runs now.
	byNode = map[string][]*player{}
	for _, p := range players {
		g, err := (&fleet.View{Client: c.Etcd}).Game(ctx, c.TenantID, p.game)
		if err == nil {
			byNode[g.Owner] = append(byNode[g.Owner], p)
		}
	}
	victim := ""
	for n, ps := range byNode {
		if len(ps) > len(byNode[victim]) || victim == "" {
			victim = n
		}
	}
	res.VictimGames = len(byNode[victim])
	for _, p := range players {
		p.mu.Lock()
		n := len(p.frames)
		p.mu.Unlock()
		if n == 0 {
			stop()
			wg.Wait()
			return res, fmt.Errorf("player of game %s received no frame during the warm-up", p.game)
		}
	}
	killed := time.Now()
	if err := c.Proc(victim).Kill(); err != nil {
		stop()
		wg.Wait()
		return res, fmt.Errorf("kill %s: %w", victim, err)
	}
	// Wait until every victim game streams from another node (bounded).
	deadline := killed.Add(10*c.cfg.LeaseTTL + 20*time.Second)
	var takeovers []float64
	pending := append([]*player(nil), byNode[victim]...)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []*player
		for _, p := range pending {
			if t, ok := p.firstFrameAfter(killed, victim); ok {
				takeovers = append(takeovers, float64(t.Sub(killed).Microseconds())/1000)
			} else {
				still = append(still, p)
			}
		}
		pending = still
		time.Sleep(20 * time.Millisecond)
	}
	res.GamesLost = len(pending)
	// Keep playing a little on the new owners, then stop and let logs flush.
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	sort.Float64s(takeovers)
	res.TakeoverMsP50, res.TakeoverMsP99 = percentile(takeovers, 0.50), percentile(takeovers, 0.99)

	specMu.Lock()
	sort.Float64s(specDelays)
	res.SpectatorDelayMsP99 = percentile(specDelays, 0.99)
	specMu.Unlock()
	var replayMs, playMin float64
	for _, p := range players {
		spec, chunks, err := c.ReadLog(ctx, p.game)
		if err != nil {
			return res, fmt.Errorf("read log of %s: %w", p.game, err)
		}
		seen := map[uint64]int{}
		for _, ch := range chunks {
			for _, e := range ch.Entries {
				if e.Event.Kind == abi.EventInput {
					seen[e.Seq]++
				}
			}
		}
		p.mu.Lock()
		for seq := range p.acked {
			res.AckedInputs++
			if seen[seq] == 0 {
				res.AckedInputsLost++
			}
		}
		p.mu.Unlock()
		for _, n := range seen {
			if n > 1 {
				res.InputsDoubled++
			}
		}
		began := time.Now()
		inst, hashes, err := simnode.Replay(ctx, eng, module, spec, chunks)
		replayMs += float64(time.Since(began).Microseconds()) / 1000
		if len(chunks) > 0 && spec.TickRate > 0 {
			playMin += float64(chunks[len(chunks)-1].To) / float64(spec.TickRate) / 60
		}
		res.HashesChecked += len(hashes)
		var desync *simnode.DesyncError
		if errors.As(err, &desync) {
			res.ReplayMismatch++
		} else if err != nil {
			return res, fmt.Errorf("replay %s: %w", p.game, err)
		}
		if inst != nil {
			inst.Close(ctx)
		}
	}
	if playMin > 0 {
		res.ReplayMsPerMinOfPlay = replayMs / playMin
	}
	return res, nil
}

// longestGap is the longest interval between consecutive frames the player
// received in [from, to], in milliseconds.
func (p *player) longestGap(from, to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	worst := 0.0
	for _, f := range p.frames {
		if f.at.Before(from) {
			last = f.at
			continue
		}
		if f.at.After(to) {
			break
		}
		if !last.IsZero() {
			worst = max(worst, float64(f.at.Sub(last).Microseconds())/1000)
		}
		last = f.at
	}
	return worst
}

// spectate watches the game's spectator stream and returns, for each frame,
// how far (ms) it runs behind the player's own view.
func (p *player) spectate(ctx context.Context) []float64 {
	var delays []float64
	s, err := p.client.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: p.game}))
	if err != nil {
		return nil
	}
	defer s.Close()
	for s.Receive() {
		f := s.Msg().GetFrame()
		if f == nil {
			continue
		}
		p.mu.Lock()
		own := p.lastTick
		p.mu.Unlock()
		if own > 0 && f.Tick > 0 {
			delays = append(delays, float64(own-f.Tick)*1000/35)
		}
	}
	return delays
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func (p *player) firstFrameAfter(t time.Time, notNode string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frames {
		if f.at.After(t) && f.node != notNode && f.node != "" {
			return f.at, true
		}
	}
	return time.Time{}, false
}

func (p *player) stream(ctx context.Context) {
	for ctx.Err() == nil {
		s, err := p.client.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: p.game}))
		if err == nil {
			for s.Receive() {
				m := s.Msg()
				p.mu.Lock()
				if st := m.GetStatus(); st != nil {
					p.nodeNow = st.NodeId
				} else if f := m.GetFrame(); f != nil {
					p.frames = append(p.frames, frameSeen{at: time.Now(), node: p.nodeNow})
					p.lastTick = f.Tick
				}
				p.mu.Unlock()
			}
			s.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *player) play(ctx context.Context) {
	seq := uint64(1)
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := p.client.SendInput(cctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: p.game, Seq: seq, Payload: []byte{byte(seq % 16)}}))
		cancel()
		if err == nil {
			p.mu.Lock()
			p.acked[r.Msg.AckedSeq] = true
			p.mu.Unlock()
			seq++ // only move on once acknowledged: unacknowledged inputs are re-sent
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ReadLog reads a game's spec and log from etcd, or from the backend's archive
// once the game has finished and left etcd.
func (c *Cluster) ReadLog(ctx context.Context, game string) (fleet.GameSpec, []*inputlog.Chunk, error) {
	spec, chunks, err := simnode.ReadLog(ctx, c.Etcd, c.TenantID, game)
	if !errors.Is(err, fleet.ErrNotFound) {
		return spec, chunks, err
	}
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.AdminKey)))
	lg, aerr := admin.GetGameLog(ctx, connect.NewRequest(&ludusv1.GetGameLogRequest{GameId: game}))
	if aerr != nil {
		return spec, nil, fmt.Errorf("%w (archive: %v)", err, aerr)
	}
	if err := json.Unmarshal(lg.Msg.SpecJson, &spec); err != nil {
		return spec, nil, err
	}
	chunks = nil
	for _, b := range lg.Msg.Chunks {
		ch, err := inputlog.Decode(b)
		if err != nil {
			return spec, nil, err
		}
		chunks = append(chunks, ch)
	}
	return spec, chunks, nil
}
