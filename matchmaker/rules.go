package matchmaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/matchmaking"
)

// MaxSeats bounds a match (teams × team size): a settlement deletes and
// writes about four keys per seat in one etcd transaction, and etcd allows
// 128 operations in one.
const MaxSeats = 32

// rulesFromProto turns a tenant's API rules into matchmaking.Rules, checking
// them; errors wrap ErrInvalid.
func rulesFromProto(tenant string, p *ludusv1.MatchmakingRules) (matchmaking.Rules, error) {
	r := matchmaking.Rules{
		Tenant:            tenant,
		Mode:              p.GetMode(),
		TeamSize:          int(p.GetTeamSize()),
		Teams:             int(p.GetTeams()),
		BandStart:         p.GetBandStart(),
		BandStep:          p.GetBandStep(),
		BandInterval:      time.Duration(p.GetBandIntervalMs()) * time.Millisecond,
		BandCap:           p.GetBandCap(),
		MaxWait:           time.Duration(p.GetMaxWaitMs()) * time.Millisecond,
		BotsFillAtTimeout: p.GetBotsFillAtTimeout(),
		MaxRTT:            map[string]float64{},
	}
	for region, ms := range p.GetMaxRttMs() {
		r.MaxRTT[region] = float64(ms)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if r.Seats() > MaxSeats {
		return r, fmt.Errorf("%w: %d teams of %d is more than %d seats", ErrInvalid, r.Teams, r.TeamSize, MaxSeats)
	}
	if !clusterstate.ValidID(r.Mode) {
		return r, fmt.Errorf("%w: mode %q must be 1 to 64 letters, digits, - or _", ErrInvalid, r.Mode)
	}
	return r, nil
}

// loadRules returns a queue's rules; ErrNoRules names the fix. They come
// from the replica's watch of every queue's rules (WatchMatchQueues), and
// from etcd for a queue the watch has not told of (rules set a moment ago,
// or none: then ErrNoRules).
func (m *Matchmaker) loadRules(ctx context.Context, tenant, mode string) (matchmaking.Rules, error) {
	if r, ok := m.watchedRules(tenant, mode); ok {
		return r.rules, r.err
	}
	b, err := m.state.MatchRules(ctx, tenant, mode)
	if errors.Is(err, clusterstate.ErrNoRules) {
		return matchmaking.Rules{}, noRules(mode)
	}
	if err != nil {
		return matchmaking.Rules{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return decodeRules(tenant, b)
}

// watchedRules returns a queue's rules as the watch last told, if it did.
func (m *Matchmaker) watchedRules(tenant, mode string) (queueRules, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rules[tenant+"/"+mode]
	return r, ok
}

func noRules(mode string) error {
	return fmt.Errorf("%w for mode %q: set them with MatchmakingAdminService.SetRules (the tenant's API key)", ErrNoRules, mode)
}

func decodeRules(tenant string, b []byte) (matchmaking.Rules, error) {
	var p ludusv1.MatchmakingRules
	if err := protojson.Unmarshal(b, &p); err != nil {
		return matchmaking.Rules{}, fmt.Errorf("%w: stored rules do not decode: %w", ErrUnavailable, err)
	}
	return rulesFromProto(tenant, &p)
}

func decodeRulesProto(b []byte, p *ludusv1.MatchmakingRules) error { return protojson.Unmarshal(b, p) }

func encodeRules(p *ludusv1.MatchmakingRules) ([]byte, error) { return protojson.Marshal(p) }

// PutRules validates and stores a tenant's rules for a mode, as
// MatchmakingAdminService.SetRules does: for operators and the dev stack,
// which seed rules without an API key.
func PutRules(ctx context.Context, state *clusterstate.Client, tenant string, p *ludusv1.MatchmakingRules) error {
	if _, err := rulesFromProto(tenant, p); err != nil {
		return err
	}
	b, err := encodeRules(p)
	if err != nil {
		return err
	}
	return state.PutMatchRules(ctx, tenant, p.GetMode(), b)
}
