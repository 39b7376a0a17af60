package backend

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Result stats and result rules: what of a module's result reaches
// progression and leaderboards.

// Limits of stats and result rules.
const (
	// MaxStats bounds the stats of one player in one report.
	MaxStats = 64
	// MaxResultRules bounds a tenant's result rules.
	MaxResultRules = 64
	// MaxRulePerUnit bounds ResultRule.per_unit.
	MaxRulePerUnit = 1_000_000
	// MaxRuleCap bounds ResultRule.cap.
	MaxRuleCap = 1_000_000_000
	// rulesTTL is how long a backend uses a tenant's rules before reading
	// them again: a change made through another replica applies within it.
	rulesTTL = 2 * time.Second
)

// statName is the pattern of a stat's name (as in match.proto).
var statName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// checkStats checks a player's stats.
func checkStats(field string, m map[string]int64) error {
	if len(m) > MaxStats {
		return fmt.Errorf("%s has %d entries; at most %d", field, len(m), MaxStats)
	}
	for k, v := range m {
		if !statName.MatchString(k) {
			return fmt.Errorf("%s: stat names must match %s, got %q", field, statName, clip(k))
		}
		if v > MaxDelta || v < -MaxDelta {
			return fmt.Errorf("%s[%s] = %d is out of range", field, k, v)
		}
	}
	return nil
}

var ruleKinds = map[ludusv1.ResultRuleKind]string{
	ludusv1.ResultRuleKind_RESULT_RULE_KIND_XP:          store.RuleXP,
	ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY:    store.RuleCurrency,
	ludusv1.ResultRuleKind_RESULT_RULE_KIND_ITEM:        store.RuleItem,
	ludusv1.ResultRuleKind_RESULT_RULE_KIND_LEADERBOARD: store.RuleLeaderboard,
}

// ruleOf checks a rule from the API and returns it as stored.
func ruleOf(i int, r *ludusv1.ResultRule) (store.ResultRule, error) {
	f := func(format string, a ...any) error {
		return fmt.Errorf("rules[%d]: %s", i, fmt.Sprintf(format, a...))
	}
	kind, ok := ruleKinds[r.Kind]
	if !ok {
		return store.ResultRule{}, f("kind must be XP, CURRENCY, ITEM or LEADERBOARD, got %v", r.Kind)
	}
	if r.Game != "" {
		if err := checkModuleName(r.Game); err != nil {
			return store.ResultRule{}, f("game: %v", err)
		}
	}
	if !statName.MatchString(r.Stat) {
		return store.ResultRule{}, f("stat must match %s (a name in the module's result, or \"score\"), got %q", statName, clip(r.Stat))
	}
	out := store.ResultRule{Game: r.Game, Stat: r.Stat, Kind: kind, Target: r.Target, PerUnit: r.PerUnit, Cap: r.Cap}
	switch kind {
	case store.RuleCurrency, store.RuleItem:
		if err := checkAmounts("target", map[string]int64{r.Target: 0}, false); err != nil {
			return store.ResultRule{}, f("a %s rule needs a target (the %s's name): %v", kind, kind, err)
		}
	default:
		if r.Target != "" {
			return store.ResultRule{}, f("a %s rule has no target, got %q", kind, clip(r.Target))
		}
	}
	if kind == store.RuleLeaderboard {
		if r.PerUnit != 0 || r.Cap != 0 {
			return store.ResultRule{}, f("a leaderboard rule has no per_unit or cap (it feeds the final value of the stat)")
		}
		return out, nil
	}
	if out.PerUnit == 0 {
		out.PerUnit = 1
	}
	if out.PerUnit < 1 || out.PerUnit > MaxRulePerUnit {
		return store.ResultRule{}, f("per_unit must be 1..%d, got %d", MaxRulePerUnit, r.PerUnit)
	}
	if r.Cap < 1 || r.Cap > MaxRuleCap {
		return store.ResultRule{}, f("cap (the most the rule credits one player in one match) must be 1..%d, got %d", MaxRuleCap, r.Cap)
	}
	return out, nil
}

func checkRules(rs []*ludusv1.ResultRule) ([]store.ResultRule, error) {
	if len(rs) > MaxResultRules {
		return nil, fmt.Errorf("at most %d rules, got %d", MaxResultRules, len(rs))
	}
	out := make([]store.ResultRule, 0, len(rs))
	boards := map[[2]string]bool{}
	for i, r := range rs {
		rule, err := ruleOf(i, r)
		if err != nil {
			return nil, err
		}
		if rule.Kind == store.RuleLeaderboard {
			k := [2]string{rule.Game, rule.Stat}
			if boards[k] {
				return nil, fmt.Errorf("rules[%d]: a second leaderboard rule for stat %q", i, rule.Stat)
			}
			boards[k] = true
		}
		out = append(out, rule)
	}
	return out, nil
}

func ruleProto(r store.ResultRule) *ludusv1.ResultRule {
	out := &ludusv1.ResultRule{Game: r.Game, Stat: r.Stat, Target: r.Target, PerUnit: r.PerUnit, Cap: r.Cap}
	for k, v := range ruleKinds {
		if v == r.Kind {
			out.Kind = k
		}
	}
	return out
}

// SetResultRules replaces the tenant's result rules.
func (s *adminService) SetResultRules(ctx context.Context, req *connect.Request[ludusv1.SetResultRulesRequest]) (*connect.Response[ludusv1.SetResultRulesResponse], error) {
	tenantID, err := s.tenantAdmin(ctx, req.Header(), "SetResultRules")
	if err != nil {
		return nil, err
	}
	rules, err := checkRules(req.Msg.Rules)
	if err != nil {
		return nil, invalidArg(err)
	}
	if err := s.store.PutResultRules(ctx, tenantID, rules); err != nil {
		return nil, s.internal(ctx, "put result rules", err)
	}
	s.rules.Delete(tenantID)
	return connect.NewResponse(&ludusv1.SetResultRulesResponse{}), nil
}

// GetResultRules returns the tenant's result rules.
func (s *adminService) GetResultRules(ctx context.Context, req *connect.Request[ludusv1.GetResultRulesRequest]) (*connect.Response[ludusv1.GetResultRulesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetResultRules", needRead)
	if err != nil {
		return nil, err
	}
	rules, err := s.store.ResultRules(ctx, tenantID)
	if err != nil {
		return nil, s.internal(ctx, "result rules", err)
	}
	out := &ludusv1.GetResultRulesResponse{}
	for _, r := range rules {
		out.Rules = append(out.Rules, ruleProto(r))
	}
	return connect.NewResponse(out), nil
}

type cachedRules struct {
	rules []store.ResultRule
	at    time.Time
}

// resultRules returns a tenant's rules, read at most rulesTTL ago.
func (s *Server) resultRules(ctx context.Context, tenantID string) ([]store.ResultRule, error) {
	now := s.now()
	if v, ok := s.rules.Load(tenantID); ok {
		c := v.(cachedRules)
		if d := now.Sub(c.at); d >= 0 && d < rulesTTL {
			return c.rules, nil
		}
	}
	rules, err := s.store.ResultRules(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	s.rules.Store(tenantID, cachedRules{rules: rules, at: now})
	return rules, nil
}

// statOf returns a player's stat. Unless the module reported stats of
// these names, "score" is the score and "win" is 1 for a player placed
// first, 0 for one placed behind (none if the place is unknown).
func statOf(p store.PlayerReport, name string) (int64, bool) {
	if v, ok := p.Stats[name]; ok {
		return v, true
	}
	switch {
	case name == "score":
		return p.Score, true
	case name == "win" && p.Place == 1:
		return 1, true
	case name == "win" && p.Place > 1:
		return 0, true
	}
	return 0, false
}

// boardKey is the leaderboard key of a stat board of a game: module names
// have no "/", so it never names a game's score board.
func boardKey(game, stat string) string { return game + "/" + stat }

// applyRules adds what the rules of game credit to each player's totals
// (the stats are cumulative, so are the credits: the store grants the
// difference to what the match granted before) and, for a final report,
// returns the stat leaderboard entries.
func applyRules(rules []store.ResultRule, game string, final bool, players []store.PlayerReport) ([]store.BoardEntry, error) {
	var boards []store.BoardEntry
	for i := range players {
		p := &players[i]
		for _, r := range rules {
			if r.Game != "" && r.Game != game {
				continue
			}
			v, ok := statOf(*p, r.Stat)
			if !ok {
				continue
			}
			if r.Kind == store.RuleLeaderboard {
				if final {
					boards = append(boards, store.BoardEntry{Board: boardKey(game, r.Stat), AccountID: p.AccountID, Value: v})
				}
				continue
			}
			credit := min(max(v, 0), r.Cap/r.PerUnit+1) * r.PerUnit // no overflow: v ≤ MaxDelta
			credit = min(credit, r.Cap)
			if credit == 0 {
				continue
			}
			switch r.Kind {
			case store.RuleXP:
				p.XP += credit
			case store.RuleCurrency:
				p.Currency = addAmount(p.Currency, r.Target, credit)
			case store.RuleItem:
				p.Items = addAmount(p.Items, r.Target, credit)
			}
			if p.XP > MaxDelta || p.Currency[r.Target] > MaxDelta || p.Items[r.Target] > MaxDelta {
				return nil, errors.New("the credits of the result rules are out of range")
			}
		}
	}
	return boards, nil
}

// addAmount returns m (copied: the caller's map may be shared) with v added to m[k].
func addAmount(m map[string]int64, k string, v int64) map[string]int64 {
	out := make(map[string]int64, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] += v
	return out
}
