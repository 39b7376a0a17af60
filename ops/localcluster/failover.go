package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
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
}

// player is a scripted client of one game: it streams frames (re-opening the
// stream whenever it ends, as a client does) and sends an input every 100 ms,
// re-sending an input until it is acknowledged.
type player struct {
	game    string
	ticket  string
	client  ludusv1connect.GameServiceClient
	mu      sync.Mutex
	acked   map[uint64]bool
	frames  []frameSeen
	nodeNow string
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
		p.client = ludusv1connect.NewGameServiceClient(http.DefaultClient, c.GatewayURL, connect.WithInterceptors(bearer(p.ticket)))
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
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return res, ctx.Err()
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
		inst, hashes, err := simnode.Replay(ctx, eng, module, spec, chunks)
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
	return res, nil
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
				} else if m.GetFrame() != nil {
					p.frames = append(p.frames, frameSeen{at: time.Now(), node: p.nodeNow})
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
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer(c.AdminKey)))
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
