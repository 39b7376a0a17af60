package arena

import (
	"errors"

	"ludus.dev/ludus/sdk"
)

// Config is the match configuration, the JSON object passed to Init, e.g.
// {"bots":3,"score_limit":10,"time_limit_s":120}. Every field is optional;
// out-of-range values are clamped rather than rejected, so a lobby cannot fail
// a match start with a slightly odd number. Unknown fields are ignored.
type Config struct {
	// Bots is the number of AI players (0..MaxPlayers). They take the highest
	// slots; a human joining a bot's slot replaces it.
	Bots int
	// ScoreLimit ends the match when a player reaches it (default 20).
	ScoreLimit int
	// TimeLimitS ends the match after this many seconds (default 300).
	TimeLimitS int
}

// Config defaults and bounds.
const (
	DefaultScoreLimit = 20
	DefaultTimeLimitS = 300
	maxScoreLimit     = 1000
	maxTimeLimitS     = 24 * 3600
)

func defaultConfig() Config {
	return Config{ScoreLimit: DefaultScoreLimit, TimeLimitS: DefaultTimeLimitS}
}

// ParseConfig decodes a config. Empty input (or JSON null) gives the defaults;
// malformed JSON and non-integer values for known fields are errors; zero or
// negative limits mean "default". It uses sdk.ConfigFields rather than
// encoding/json to keep the module small.
func ParseConfig(b []byte) (Config, error) {
	cfg := defaultConfig()
	err := sdk.ConfigFields(b, func(key string, v sdk.JSONValue) error {
		var dst *int
		switch key {
		case "bots":
			dst = &cfg.Bots
		case "score_limit":
			dst = &cfg.ScoreLimit
		case "time_limit_s":
			dst = &cfg.TimeLimitS
		default:
			return nil
		}
		if v.IsNull() {
			return nil
		}
		n, err := v.Int()
		if err != nil {
			return errors.New("arena: config field " + key + " must be an integer")
		}
		*dst = int(min(max(n, -1), 1<<30))
		return nil
	})
	if err != nil {
		return defaultConfig(), err
	}
	cfg.Bots = min(max(cfg.Bots, 0), MaxPlayers)
	if cfg.ScoreLimit <= 0 {
		cfg.ScoreLimit = DefaultScoreLimit
	}
	cfg.ScoreLimit = min(cfg.ScoreLimit, maxScoreLimit)
	if cfg.TimeLimitS <= 0 {
		cfg.TimeLimitS = DefaultTimeLimitS
	}
	cfg.TimeLimitS = min(cfg.TimeLimitS, maxTimeLimitS)
	return cfg, nil
}
