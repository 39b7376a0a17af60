package clusterstate

import (
	"encoding/json"
	"errors"
	"time"
)

// NodeInfo is what a sim node publishes about itself (PublishNode).
type NodeInfo struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"` // base URL of its NodeService, e.g. http://127.0.0.1:7001
	Region   string `json:"region"`
	Capacity int    `json:"capacity"`
	Games    int    `json:"games"`
	Draining bool   `json:"draining"`
	// Lease is the node's current lease: a node handing a game over binds the
	// owner key to the receiving node's lease.
	Lease int64 `json:"lease"`
}

// GameSpec is everything needed to (re)build a game from its log.
type GameSpec struct {
	TenantID     string    `json:"tenant_id"`
	GameID       string    `json:"game_id"`
	ModuleName   string    `json:"module_name"`
	BuildID      string    `json:"build_id"`
	Seed         uint64    `json:"seed"`
	Config       []byte    `json:"config"`
	CreatedAt    time.Time `json:"created_at"`
	TickRate     int       `json:"tick_rate"`
	MaxPlayers   int       `json:"max_players"`
	FrameDivisor int       `json:"frame_divisor"`
	ViewFormat   string    `json:"view_format"`
	// InputKind is the module's abi.InputState or abi.InputEvent.
	InputKind string `json:"input_kind,omitempty"`
	// SnapshotFormat is set when the module sends snapshots it renders itself.
	SnapshotFormat string `json:"snapshot_format,omitempty"`
	ViewWidth      int    `json:"view_width,omitempty"`
	ViewHeight     int    `json:"view_height,omitempty"`
	// ModuleMeta is the module's metadata as it declared it (ludus_meta), sent
	// to clients in the first Status of a stream so a page can present any game.
	ModuleMeta json.RawMessage `json:"module_meta,omitempty"`
	// MatchCredential lets whichever node runs the game report its progress and
	// result to the backend (and only this match's). It lives with the spec so it
	// survives failover; etcd is cluster-internal.
	MatchCredential string `json:"match_credential,omitempty"`
	// Region is the region of the node that started the game (its players
	// were sent there): a failed-over game resumes in it when a node of it
	// has room. Empty in games started before it was recorded.
	Region string `json:"region,omitempty"`
	// Bots is how many seats the module's bots hold (the "bots" count of the
	// config the game was created with); the lobby shows it.
	Bots int `json:"bots,omitempty"`
	// HostName is the display name of the player who created the game ("" if
	// unknown: created by the matchmaker or an operator).
	HostName string `json:"host_name,omitempty"`
	// Reserved are the accounts the matchmaker matched into the game: when
	// set, only they may join (a matched game is not open to the lobby).
	Reserved []string `json:"reserved,omitempty"`
}

// Game states.
const (
	StateRunning = "running"
	StateEnded   = "ended"
	StateFailed  = "failed"
)

// GameStatus is the latest durable status of a game.
type GameStatus struct {
	State   string `json:"state"`
	Tick    int64  `json:"tick"`
	Players int    `json:"players"`
	NodeID  string `json:"node_id"`
	Message string `json:"message,omitempty"`
}

// Finished reports whether the game is over (ended or failed).
func (s GameStatus) Finished() bool { return s.State == StateEnded || s.State == StateFailed }

// Errors. Wrapped errors carry the game or node concerned; test with errors.Is.
var (
	// ErrGameNotFound: no such game (or it belongs to another tenant).
	ErrGameNotFound = errors.New("clusterstate: game not found")
	// ErrNodeNotFound: no such sim node is registered.
	ErrNodeNotFound = errors.New("clusterstate: node not found")
	// ErrGameExists: Claim found the game's spec or owner key already there.
	ErrGameExists = errors.New("clusterstate: game exists")
	// ErrClaimed: ClaimOrphan found the game owned again (another node was
	// faster) or gone.
	ErrClaimed = errors.New("clusterstate: game already claimed")
	// ErrClaimLost: the owner key no longer holds this claim (value and create
	// revision), so nothing was written.
	ErrClaimLost = errors.New("clusterstate: claim lost")
	// ErrNoOwner: the game has no owner key.
	ErrNoOwner = errors.New("clusterstate: game has no owner")
	// ErrSessionFenced: the session stopped trusting its lease (Session.Err).
	ErrSessionFenced = errors.New("clusterstate: session fenced")
)
