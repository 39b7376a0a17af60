// Package store defines the persistence interface of the backend and its
// records. Implementations (store/sqlite and store/postgres, both built on
// store/sqlstore) must pass the shared suite in store/storetest.
//
// The store is deliberately dumb: callers generate ids, validate input and hash
// secrets; the store keeps records verbatim (parameterized queries only) and
// enforces uniqueness. Times are kept with microsecond precision, in UTC.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors every implementation returns (wrapped) for the matching conditions.
var (
	// ErrNotFound: no such record, or a referenced record (e.g. the tenant of
	// a new account) does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrAlreadyExists: a unique key (tenant slug, account device, key hash,
	// id) is taken.
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrInvalid: a value the database cannot store (e.g. a string too long
	// for an index, or with a NUL byte on PostgreSQL). Callers should have
	// refused it earlier; this keeps it from becoming an internal error.
	ErrInvalid = errors.New("store: value cannot be stored")
	// ErrInsufficient: a change would take a wallet balance or an item
	// count below zero. Nothing of the change is applied.
	ErrInsufficient = errors.New("store: insufficient balance")
	// ErrRefreshReused: a refresh token that was already used was presented
	// again. Its whole family has been revoked.
	ErrRefreshReused = errors.New("store: refresh token reused")
	// ErrRevoked: a refresh token whose family is revoked, or that expired.
	ErrRevoked = errors.New("store: refresh token revoked or expired")
	// ErrMatchEnded: a report for a match whose final result is stored.
	ErrMatchEnded = errors.New("store: match ended")
	// ErrLimit: the record would take its owner past a bound on how many
	// it may hold (MaxAPIKeysPerTenant; ModuleBound: then it is a
	// *ModuleLimitError; MaxCurrenciesPerAccount, MaxItemsPerAccount: then
	// it is a *LimitError). Nothing is stored.
	ErrLimit = errors.New("store: limit reached")
)

// MaxAPIKeysPerTenant is how many API keys a tenant may hold: a studio
// needs a few per environment, and every key is a credential someone must
// be able to review (ListAPIKeys) and revoke.
const MaxAPIKeysPerTenant = 100

// The bound on a tenant's stored module builds (DefaultModuleBound). A build
// is up to 32 MiB and every upload of new bytes keeps one more, forever
// until deleted: without a bound, a CI that uploads every commit (or a
// leaked admin key) fills the database. 200 builds is months of daily
// uploads of a few games, or a long `ludus dev` session (which deletes its
// own old builds); 2 GiB is 64 builds at the largest size, hundreds at
// the usual few MiB.
const (
	MaxModuleBuildsPerTenant       = 200
	MaxModuleBytesPerTenant  int64 = 2 << 30
)

// ModuleBound bounds what a tenant's stored builds may add up to: Builds
// stored copies (a build under a name is one; the same bytes under two names
// are stored, and counted, twice) and Bytes of wasm over all of them.
type ModuleBound struct {
	Builds int
	Bytes  int64
}

// DefaultModuleBound is the bound the backend enforces.
var DefaultModuleBound = ModuleBound{Builds: MaxModuleBuildsPerTenant, Bytes: MaxModuleBytesPerTenant}

// ModuleLimitError is PutModule's refusal of a build that would take its
// tenant past a ModuleBound: what the tenant stores now, and the bound. It
// wraps ErrLimit.
type ModuleLimitError struct {
	Builds int   // builds stored
	Bytes  int64 // their bytes
	Bound  ModuleBound
}

func (e *ModuleLimitError) Error() string {
	return fmt.Sprintf("store: tenant stores %d module builds (%d bytes); the bound is %d builds and %d bytes",
		e.Builds, e.Bytes, e.Bound.Builds, e.Bound.Bytes)
}

func (e *ModuleLimitError) Unwrap() error { return ErrLimit }

// Bounds on the distinct keys one account's progression holds, so that an
// account (its GetProgression answer, its export, its rows) stays small
// whatever a tenant or its result rules grant. A currency is held once
// granted, also at a zero balance (the wallet shows it); an item while its
// count is not zero.
const (
	// MaxCurrenciesPerAccount: games have a handful of currencies; 100
	// leaves room for event currencies that stay in the wallet at zero.
	MaxCurrenciesPerAccount = 100
	// MaxItemsPerAccount: distinct items (kinds, not counts) held at once.
	MaxItemsPerAccount = 1000
)

// LimitError is the ErrLimit of a change that would give an account more
// distinct currencies or items than it may hold. errors.Is(err, ErrLimit).
type LimitError struct {
	What string // "currencies" or "items"
	Max  int    // MaxCurrenciesPerAccount or MaxItemsPerAccount
	Held int    // how many the account holds
	New  int    // how many the change would add
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("store: the account holds %d %s and the change adds %d, more than %d", e.Held, e.What, e.New, e.Max)
}

func (e *LimitError) Unwrap() error { return ErrLimit }

// SkippedGrant is a currency or item a match report did not grant because
// the account holds as many distinct ones as it may (see MatchReport.Skipped).
type SkippedGrant struct {
	AccountID string
	Kind      string // RuleCurrency or RuleItem
	Name      string
	Amount    int64
}

// Tenant is a studio.
type Tenant struct {
	ID        string
	Slug      string
	Name      string
	CreatedAt time.Time
}

// APIKey is an API key of a tenant. Only a hash of the key is stored.
type APIKey struct {
	ID       string
	TenantID string
	// Hash is the SHA-256 of the key (32 bytes), unique across tenants.
	Hash []byte
	// Scope says what the key may do: "admin", "server" or "read-only".
	Scope string
	// Name is a label for people ("ci", "game server eu").
	Name      string
	CreatedAt time.Time
}

// Account is a player account of a tenant.
type Account struct {
	ID       string
	TenantID string
	// DeviceID binds a guest account to a device; unique per tenant. Empty
	// for accounts signed in otherwise.
	DeviceID string
	// Email (lowercased by the caller) is unique per tenant; empty if none.
	Email string
	// PasswordHash is the PHC string of the password (argon2id); empty if none.
	PasswordHash string
	// CustomID is the studio's own id of the player, unique per tenant.
	CustomID    string
	DisplayName string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Module is a game module build stored under a name. The same bytes (build id)
// may be stored under several names; a name has a history of builds, the
// newest put last.
type Module struct {
	TenantID string
	Name     string
	// BuildID is the lowercase hex SHA-256 of the module's bytes.
	BuildID      string
	ABIVersion   int
	MetaName     string // name the module declares in ludus_meta
	TickRate     int
	MaxPlayers   int
	FrameDivisor int
	ViewFormat   string
	ViewWidth    int
	ViewHeight   int
	SizeBytes    int64
	// CreatedAt is the first upload of this build under this name.
	CreatedAt time.Time
	// UploadedAt is the latest upload of this build under this name.
	UploadedAt time.Time
}

// SigningKey is a ticket signing key (see package auth).
type SigningKey struct {
	ID string
	// Private is the private key as written by auth.MarshalPrivate.
	Private   []byte
	CreatedAt time.Time
	// RetiredAt is zero while the key is current.
	RetiredAt time.Time
}

// LoginThrottle counts failed logins for one identifier (e.g. an email).
type LoginThrottle struct {
	Failures    int
	LastFailure time.Time
	LockedUntil time.Time
}

// RefreshReuseMemory is how many used tokens a refresh family keeps: a
// token presented again while it is kept revokes its family (theft or a
// replay); an older one is unknown (refused, the family left alone).
const RefreshReuseMemory = 8

// RefreshToken is an opaque refresh token, stored as the SHA-256 of its secret.
// Tokens of one login share a family; using a token replaces it with the next.
type RefreshToken struct {
	Hash      []byte
	FamilyID  string
	TenantID  string
	AccountID string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Change is one idempotent change to an account's progression. Deltas may be
// negative; Currency and Items map names to deltas.
type Change struct {
	TenantID  string
	AccountID string
	// Key makes the change idempotent: a second change with the same key for
	// the same account is not applied.
	Key      string
	XP       int64
	Currency map[string]int64
	Items    map[string]int64
	Reason   string
	At       time.Time
}

// Progression is an account's XP, wallet and inventory.
type Progression struct {
	XP       int64
	Currency map[string]int64
	Items    map[string]int64
}

// LedgerEntry is one wallet movement.
type LedgerEntry struct {
	Seq      int64
	Currency string
	Delta    int64
	Balance  int64
	Key      string
	Reason   string
	At       time.Time
}

// Match is a match known to the backend: created when its report credential
// is minted, ended when its final result is stored.
type Match struct {
	TenantID string
	ID       string
	Game     string // module name: leaderboards are per game
	// CredentialHash is the SHA-256 of the match-scoped credential.
	CredentialHash []byte
	CreatedAt      time.Time
	ExpiresAt      time.Time
	EndedAt        time.Time // zero while running
	LastSeq        int64     // highest report sequence applied
}

// PlayerReport is one player's cumulative figures in a match report: totals
// since the start of the match, not deltas.
type PlayerReport struct {
	AccountID  string
	Score      int64
	DurationMs int64
	Damage     int64
	ItemsUsed  map[string]int64
	XP         int64
	Currency   map[string]int64
	Items      map[string]int64
	// Stats are the module's per-player integer fields (kills, coins, ...),
	// cumulative, stored verbatim with the result.
	Stats map[string]int64
	// Place is where the player finished (1 = won; 0 = unknown) and Team
	// the player's team (0 = none). Stored with the result.
	Place int
	Team  int
}

// BoardEntry is one player's value for a stat leaderboard (see
// MatchReport.Boards).
type BoardEntry struct {
	// Board is the leaderboard's key, e.g. "arena/kills"; it shares the
	// leaderboard table with the per-game score boards (keyed by the game).
	Board     string
	AccountID string
	Value     int64
}

// Result rule kinds (ResultRule.Kind).
const (
	RuleXP          = "xp"
	RuleCurrency    = "currency"
	RuleItem        = "item"
	RuleLeaderboard = "leaderboard"
)

// ResultRule turns a per-player stat of match results into progression:
// stat × PerUnit of XP, a currency or an item (Target), at most Cap per
// player and match; or a leaderboard entry. The backend validates rules and
// applies them; the store keeps them verbatim.
type ResultRule struct {
	Game    string // module name; empty: every game
	Stat    string
	Kind    string
	Target  string
	PerUnit int64
	Cap     int64
}

// Rating is an account's skill rating in a game mode (Glicko-2, public
// scale). Matches counts the rated matches.
type Rating struct {
	TenantID   string
	Mode       string
	AccountID  string
	Rating     float64
	RD         float64
	Volatility float64
	Matches    int64
	UpdatedAt  time.Time
}

// RatingUpdate rates a match's players when its final result is stored, in
// the same transaction (so exactly once).
type RatingUpdate struct {
	Mode string
	// Rate gets the stored ratings of the match's players whose accounts
	// exist, each with its AccountID (Matches 0 and zero values for a
	// player never rated in Mode), and returns their new ratings in the
	// same order; the store keeps Rating, RD and Volatility of them and
	// counts the match. An error fails the report.
	Rate func(before []Rating) ([]Rating, error)
}

// MatchReport is a cumulative report of a match. Interim reports have
// Final false and increasing Seq; the final report ends the match.
type MatchReport struct {
	TenantID string
	MatchID  string
	Seq      int64
	Final    bool
	Players  []PlayerReport
	At       time.Time
	// Webhook, if set on a final report, is queued in the same transaction.
	Webhook *WebhookDelivery
	// Boards, on a final report, are stat leaderboard entries: each adds
	// Value to the account's sum on Board (and a match, and a new best).
	// Entries of accounts that do not exist are skipped.
	Boards []BoardEntry
	// Rating, if set on a final report, rates its players.
	Rating *RatingUpdate
	// Skipped, if set, gets the grants the report left out once it is
	// applied: a currency or item an account does not hold yet, when it
	// holds MaxCurrenciesPerAccount currencies (MaxItemsPerAccount items)
	// already. A result must apply whatever its players hold, so the rest
	// of it applies; which keys fit is decided in name order, the same way
	// every time. A skipped key is not counted as granted by the match, so
	// a later report of the match grants it if the account has room then.
	Skipped *[]SkippedGrant
}

// MatchResult is a stored final result.
type MatchResult struct {
	TenantID string
	MatchID  string
	Game     string
	Players  []PlayerReport
	EndedAt  time.Time
}

// AccountMatch is one account's own row of a stored final result: what an
// export of the account carries of each match it played. Of a match not
// ended (EachUnfinishedAccountMatch), EndedAt is zero and Player holds the
// totals of its latest report.
type AccountMatch struct {
	MatchID   string
	Game      string
	CreatedAt time.Time // when the match's report credential was minted
	EndedAt   time.Time
	Player    PlayerReport
}

// RosterEntry is an account's place on one match's roster: what an export
// of the account carries of each match a gateway registered it for.
type RosterEntry struct {
	MatchID string
	AddedAt time.Time
}

// AppliedChange is a change key an account's progression took: a grant's
// idempotency key, or a match report's ("match/<id>/<seq>", "match/<id>/final").
// It is kept so that the same key never applies twice.
type AppliedChange struct {
	Key string
	At  time.Time
}

// AccountSession is one sign-in of an account as its refresh-token family
// keeps it: times only, never a token or its hash.
type AccountSession struct {
	// FirstTokenAt is when the oldest token still kept was issued: the
	// sign-in, unless the session refreshed so often that its first used
	// tokens were forgotten (RefreshReuseMemory).
	FirstTokenAt time.Time
	// LastTokenAt is when the newest token was issued: the sign-in or the
	// latest refresh.
	LastTokenAt time.Time
	// ExpiresAt is when the newest token expires.
	ExpiresAt time.Time
	// Revoked: signed out, or a used token was presented again.
	Revoked bool
}

// AccountBoard is an account's row on one leaderboard: a game's score
// board (Board is the game) or a stat board (e.g. "arena/kills").
type AccountBoard struct {
	Board   string
	Best    int64
	Sum     int64
	Matches int64
}

// LeaderboardEntry is an account's standing on a game's leaderboard.
type LeaderboardEntry struct {
	Rank      int64 // 1-based
	AccountID string
	Best      int64
	Sum       int64
	Matches   int64
}

// Webhook is a tenant's webhook endpoint.
type Webhook struct {
	TenantID string
	URL      string
	Secret   []byte
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event to deliver (the outbox).
type WebhookDelivery struct {
	ID        string // also the idempotency key sent to the receiver
	TenantID  string
	Event     string
	Payload   []byte
	State     string
	Attempts  int
	NextAt    time.Time
	LastError string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// GameArchive is an ended game's spec and input log, archived by its sim
// node for replays. Stored verbatim.
type GameArchive struct {
	TenantID string
	GameID   string
	SpecJSON []byte
	// Chunks are the encoded input log chunks, in order.
	Chunks    [][]byte
	State     string
	Message   string
	FinalTick int64
	// GuestLog is what the module printed (an encoded ludus.v1.GuestLog);
	// empty when the node sent none.
	GuestLog []byte
	// SizeBytes is len(SpecJSON) plus the chunks' and the guest log's lengths
	// (set by the store).
	SizeBytes  int64
	ArchivedAt time.Time
}

// Quotas bound what a tenant may use; 0 means unlimited (docs/OPERATIONS.md,
// "Quotas and usage"). The backend validates them.
type Quotas struct {
	TenantID          string
	LiveGames         int64
	GamesPerMinute    int64
	CPUSecondsPerHour int64
	ArchiveBytes      int64
	MaxGameDurationS  int64
	// UpdatedAt is when they were last put; zero if never.
	UpdatedAt time.Time
}

// UsageRecord is what a tenant used in one hour: metered by sim nodes (CPU,
// etcd writes, games timed out), gateways (player time, stream bytes) and the
// backend (archived bytes). Reports add to it.
type UsageRecord struct {
	TenantID string
	// Hour is the start of the hour (UTC, whole hours).
	Hour          time.Time
	CPUMicros     int64
	PlayerMillis  int64
	StreamBytes   int64
	EtcdWrites    int64
	ArchiveBytes  int64
	GamesTimedOut int64
}

// Store is the backend's persistence. Implementations are safe for concurrent use.
type Store interface {
	// CreateTenant creates a tenant together with its first API keys, atomically.
	// ErrAlreadyExists if the slug or id is taken.
	CreateTenant(ctx context.Context, t Tenant, keys ...APIKey) error
	TenantByID(ctx context.Context, id string) (Tenant, error)
	TenantBySlug(ctx context.Context, slug string) (Tenant, error)
	// ListTenants returns all tenants, oldest first (ties by slug).
	ListTenants(ctx context.Context) ([]Tenant, error)

	// CreateAPIKey stores a key. ErrNotFound if the tenant does not exist.
	// ErrLimit if the tenant holds MaxAPIKeysPerTenant keys already.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// APIKeyByHash finds a key by the hash of its secret.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)
	// ListAPIKeys lists a tenant's keys, oldest first.
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)
	// ReplaceAPIKey atomically deletes key oldID of the tenant and stores k
	// (rotation). ErrNotFound if the tenant has no such key.
	ReplaceAPIKey(ctx context.Context, tenantID, oldID string, k APIKey) error
	// DeleteAPIKey revokes a key. ErrNotFound if the tenant has no such key.
	DeleteAPIKey(ctx context.Context, tenantID, keyID string) error

	// CreateAccount stores a new account. ErrAlreadyExists if the device id
	// is taken in the tenant; ErrNotFound if the tenant does not exist.
	CreateAccount(ctx context.Context, a Account) error
	AccountByID(ctx context.Context, tenantID, accountID string) (Account, error)
	AccountByDevice(ctx context.Context, tenantID, deviceID string) (Account, error)
	AccountByEmail(ctx context.Context, tenantID, email string) (Account, error)
	AccountByCustomID(ctx context.Context, tenantID, customID string) (Account, error)
	// SetDisplayName renames an account.
	SetDisplayName(ctx context.Context, tenantID, accountID, name string, at time.Time) error
	// UpdateAccount replaces the identities (device, email, password hash,
	// custom id), display name and UpdatedAt of an existing account.
	// ErrAlreadyExists if an identity is taken by another account.
	UpdateAccount(ctx context.Context, a Account) error
	// DeleteAccount deletes an account and everything of it (progression,
	// refresh tokens, leaderboard entries). ErrNotFound if there is none.
	DeleteAccount(ctx context.Context, tenantID, accountID string) error

	// LoginThrottle returns the throttle of an identifier (zero if none).
	LoginThrottle(ctx context.Context, tenantID, key string) (LoginThrottle, error)
	// PutLoginThrottle stores it; a zero throttle deletes it.
	PutLoginThrottle(ctx context.Context, tenantID, key string, t LoginThrottle) error
	// DeleteStaleLoginThrottles deletes up to limit throttles whose last
	// failure was before failedBefore and whose lockout, if any, ended
	// before now (throttles that no longer hold anyone back), and returns
	// how many it deleted.
	DeleteStaleLoginThrottles(ctx context.Context, failedBefore, now time.Time, limit int) (int, error)

	// DeviceSession signs a device in, in one transaction: it stores a (a new
	// guest account with a.DeviceID) unless the tenant already has an account
	// with that device; renames the account to rename if rename is not empty
	// and differs (setting UpdatedAt to a.UpdatedAt); and stores refresh token
	// t for the account (t.TenantID and t.AccountID are set from it). It
	// returns the account and whether it was created. ErrNotFound if the
	// tenant does not exist.
	DeviceSession(ctx context.Context, a Account, rename string, t RefreshToken) (acc Account, created bool, err error)

	// CreateRefreshToken stores a token (the first of a family, usually).
	CreateRefreshToken(ctx context.Context, t RefreshToken) error
	// UseRefreshToken atomically consumes the token with this hash and
	// stores next in its family (next.FamilyID, TenantID and AccountID are
	// set from the old token). It returns the old token. ErrNotFound if
	// unknown; ErrRevoked if its family is revoked or it expired at at;
	// ErrRefreshReused if it was used before (the family is then revoked).
	// It keeps the family's newest RefreshReuseMemory used tokens (a second
	// use of one revokes the family) and deletes older used ones, so that a
	// family holds a bounded number of tokens however often it is used.
	UseRefreshToken(ctx context.Context, hash []byte, at time.Time, next RefreshToken) (RefreshToken, error)
	// RevokeRefreshFamily revokes the family of the token with this hash.
	// ErrNotFound if unknown.
	RevokeRefreshFamily(ctx context.Context, hash []byte) error
	// RevokeAccountRefreshTokens revokes every refresh token of an account
	// (all its sessions), e.g. when its password changed.
	RevokeAccountRefreshTokens(ctx context.Context, tenantID, accountID string) error
	// DeleteExpiredRefreshTokens deletes up to limit refresh tokens that
	// expired at or before now, oldest first, whether used, revoked or
	// neither (none of them can be used again: UseRefreshToken refuses an
	// expired token as it refuses an unknown one), and returns how many it
	// deleted.
	DeleteExpiredRefreshTokens(ctx context.Context, now time.Time, limit int) (int, error)
	// TrimRefreshFamilies finds up to accounts accounts that hold tokens of
	// more than keep families and deletes the tokens of all but their keep
	// newest families (by their newest token's CreatedAt; the sessions of
	// the deleted ones must sign in again). It returns how many accounts it
	// trimmed and how many tokens it deleted.
	TrimRefreshFamilies(ctx context.Context, keep, accounts int) (trimmed, deleted int, err error)
	// EachAccountSession calls fn with every session of the account whose
	// refresh tokens are still stored (one per family), the most recently
	// refreshed first, as one query streams them. An error of fn ends the
	// iteration.
	EachAccountSession(ctx context.Context, tenantID, accountID string, fn func(AccountSession) error) error

	// ApplyChange applies a progression change atomically, once per
	// (tenant, account, key). applied is false if the key was seen before.
	// ErrInsufficient if a balance would go negative; ErrNotFound if the
	// account does not exist; a *LimitError (ErrLimit) if the account
	// would hold more than MaxCurrenciesPerAccount currencies or
	// MaxItemsPerAccount items. An item whose count reaches zero is no
	// longer held (its row is deleted).
	ApplyChange(ctx context.Context, c Change) (applied bool, err error)
	// Progression returns an account's progression (zero if none).
	Progression(ctx context.Context, tenantID, accountID string) (Progression, error)
	// Ledger returns the newest wallet movements of an account, newest first.
	Ledger(ctx context.Context, tenantID, accountID string, limit int) ([]LedgerEntry, error)
	// EachLedgerEntry calls fn with every wallet movement of an account,
	// newest first, as one query streams them: however long the ledger,
	// the caller holds one entry at a time. An error of fn ends the
	// iteration and is returned as is.
	EachLedgerEntry(ctx context.Context, tenantID, accountID string, fn func(LedgerEntry) error) error
	// EachAppliedChange calls fn with every change key the account's
	// progression took (grants and match reports), newest first (ties by
	// key), as one query streams them. An error of fn ends the iteration.
	EachAppliedChange(ctx context.Context, tenantID, accountID string, fn func(AppliedChange) error) error

	// CreateMatch stores a match. ErrAlreadyExists if the id is taken.
	CreateMatch(ctx context.Context, m Match) error
	// MatchByCredential finds a match by its credential hash.
	MatchByCredential(ctx context.Context, hash []byte) (Match, error)
	// DeleteUnreportedMatches deletes up to limit matches that never
	// reported (no interim report, no result) and whose credential expired
	// at or before now, so none can report any more (a game a node refused,
	// or that never started), with their rosters; oldest first. It returns
	// how many it deleted.
	DeleteUnreportedMatches(ctx context.Context, now time.Time, limit int) (int, error)
	// ApplyMatchReport applies a cumulative report exactly once: a report
	// whose Seq is not above the match's LastSeq (interim) or any report
	// after the final one changes nothing (applied false). Each player's
	// progression gets the difference between the report's totals and what
	// earlier reports of the match granted; a final report also stores the
	// result, feeds the leaderboards and queues r.Webhook. ErrNotFound if the
	// match or a player's account does not exist. The caps on an account's
	// currencies and items never fail a report: see MatchReport.Skipped.
	ApplyMatchReport(ctx context.Context, r MatchReport) (applied bool, err error)
	// AddMatchPlayers puts accounts on a match's roster, the accounts its
	// reports may credit; adding one already on it does nothing. All or
	// nothing: ErrNotFound if the match or one of the accounts does not exist
	// in the tenant; ErrMatchEnded if the match's final result is stored.
	// Roster entries go with the match (and its tenant), not with an account:
	// a deleted account stays on the rosters it was on (an id, nothing else)
	// so the match's result still applies to the others.
	AddMatchPlayers(ctx context.Context, tenantID, matchID string, accountIDs []string, at time.Time) error
	// MatchRoster returns the account ids on a match's roster, sorted;
	// empty if none was added (or there is no such match).
	MatchRoster(ctx context.Context, tenantID, matchID string) ([]string, error)
	// EachAccountRosterEntry calls fn with every roster the account is on,
	// newest first (ties by match id), as one query streams them (by the
	// roster's (tenant_id, account_id) index). An error of fn ends the
	// iteration and is returned as is.
	EachAccountRosterEntry(ctx context.Context, tenantID, accountID string, fn func(RosterEntry) error) error
	// MatchResult returns a stored final result.
	MatchResult(ctx context.Context, tenantID, matchID string) (MatchResult, error)
	// ListMatchResults returns a tenant's final results, newest first;
	// accountID, if set, keeps the matches that account played. It reads
	// them and their players with one query, however many there are.
	ListMatchResults(ctx context.Context, tenantID, accountID string, limit int) ([]MatchResult, error)
	// EachAccountMatch calls fn with the account's own row of every final
	// result it played, newest first (ties by match id), as one query
	// streams them. An error of fn ends the iteration and is returned as is.
	EachAccountMatch(ctx context.Context, tenantID, accountID string, fn func(AccountMatch) error) error
	// EachUnfinishedAccountMatch calls fn with the account's row of every
	// match it was reported in that has no final result (running, or
	// abandoned after an interim report), newest first (ties by match id),
	// as one query streams them. An error of fn ends the iteration.
	EachUnfinishedAccountMatch(ctx context.Context, tenantID, accountID string, fn func(AccountMatch) error) error
	// EachAccountBoard calls fn with the account's row of every leaderboard
	// it is on, score boards and stat boards, by board name, as one query
	// streams them. An error of fn ends the iteration.
	EachAccountBoard(ctx context.Context, tenantID, accountID string, fn func(AccountBoard) error) error
	// Leaderboard returns the top entries of a game ordered by best score
	// (byBest) or by sum, from rank offset+1.
	Leaderboard(ctx context.Context, tenantID, game string, byBest bool, offset, limit int) ([]LeaderboardEntry, error)
	// LeaderboardRank returns an account's entry (with its rank).
	LeaderboardRank(ctx context.Context, tenantID, game string, byBest bool, accountID string) (LeaderboardEntry, error)

	// PutResultRules replaces a tenant's result rules (none: no rules).
	// ErrNotFound if the tenant does not exist.
	PutResultRules(ctx context.Context, tenantID string, rules []ResultRule) error
	// ResultRules returns a tenant's result rules in the order put; empty
	// if none.
	ResultRules(ctx context.Context, tenantID string) ([]ResultRule, error)
	// Ratings returns the stored ratings of accounts in a mode, by account
	// id; accounts never rated in the mode are absent. For the matchmaker
	// and GetRating.
	Ratings(ctx context.Context, tenantID, mode string, accountIDs []string) (map[string]Rating, error)
	// EachAccountRating calls fn with the account's rating in every mode it
	// was rated in, by mode, as one query streams them. An error of fn ends
	// the iteration.
	EachAccountRating(ctx context.Context, tenantID, accountID string, fn func(Rating) error) error

	// PutWebhook sets (or with an empty URL removes) a tenant's webhook.
	PutWebhook(ctx context.Context, w Webhook) error
	Webhook(ctx context.Context, tenantID string) (Webhook, error)
	// DueDeliveries leases up to limit pending deliveries due at at: their
	// NextAt moves to leaseUntil so other replicas skip them meanwhile.
	DueDeliveries(ctx context.Context, at, leaseUntil time.Time, limit int) ([]WebhookDelivery, error)
	// UpdateDelivery stores a delivery's State, Attempts, NextAt, LastError
	// and UpdatedAt.
	UpdateDelivery(ctx context.Context, d WebhookDelivery) error
	// ListDeliveries lists a tenant's deliveries, newest first.
	ListDeliveries(ctx context.Context, tenantID string, limit int) ([]WebhookDelivery, error)
	// DeleteFinishedDeliveries deletes up to limit deliveries that are
	// delivered or failed and whose last attempt (UpdatedAt) was before
	// before, and returns how many it deleted. Pending ones stay.
	DeleteFinishedDeliveries(ctx context.Context, before time.Time, limit int) (int, error)

	// PutModule stores a build under a name and makes it the newest of that
	// name; m.UploadedAt is the time of this upload (CreatedAt is ignored and
	// set to it on the first put). Putting the same build under the same name
	// again stores no new bytes: it updates UploadedAt and the metadata and
	// makes the build the newest again. SizeBytes is set from wasm. It returns
	// the stored record. ErrNotFound if the tenant does not exist. A build
	// not yet stored under the name that would take the tenant past bound
	// is refused with a *ModuleLimitError (ErrLimit), counted and checked in
	// the transaction that stores it, so that concurrent puts (from any
	// number of processes) cannot together overshoot the bound; a put of a
	// build the name already has is never refused.
	PutModule(ctx context.Context, m Module, wasm []byte, bound ModuleBound) (Module, error)
	// LatestModule returns the newest build put under a name.
	LatestModule(ctx context.Context, tenantID, name string) (Module, error)
	// GetModule returns a build of the tenant with its bytes. A build of
	// another tenant is ErrNotFound.
	GetModule(ctx context.Context, tenantID, buildID string) (Module, []byte, error)
	// ListModules returns the tenant's modules (every build under every
	// name), newest first, without their bytes.
	ListModules(ctx context.Context, tenantID string) ([]Module, error)
	// DeleteModule deletes a build of the tenant: under name, or under every
	// name if name is "". It returns the records deleted; ErrNotFound if
	// there was none. Whether the build may go (a game may run it) is the
	// caller's to check.
	DeleteModule(ctx context.Context, tenantID, buildID, name string) ([]Module, error)

	// PutGameArchive stores a game's archive, replacing any earlier archive
	// of the same game (so archiving twice is harmless), except that an
	// archive without a guest log keeps the one stored: only the node that
	// ran the game has it. ErrNotFound if the tenant does not exist.
	PutGameArchive(ctx context.Context, a GameArchive) error
	// GameArchive returns a game's archive with its spec and chunks. A game
	// of another tenant is ErrNotFound.
	GameArchive(ctx context.Context, tenantID, gameID string) (GameArchive, error)
	// ListGameArchives lists a tenant's archives, newest first, without
	// spec and chunks.
	ListGameArchives(ctx context.Context, tenantID string, limit int) ([]GameArchive, error)

	// PutQuotas replaces a tenant's quotas. ErrNotFound if the tenant does
	// not exist.
	PutQuotas(ctx context.Context, q Quotas) error
	// Quotas returns a tenant's quotas: all zero (unlimited, UpdatedAt zero)
	// if none were put.
	Quotas(ctx context.Context, tenantID string) (Quotas, error)
	// AddUsage adds records to the stored usage of their (tenant, hour), once
	// per (reporter, reportID) within two days: a report seen before adds
	// nothing (applied false). All or nothing: ErrNotFound if a record's
	// tenant does not exist. Report ids older than two days before at are
	// forgotten.
	AddUsage(ctx context.Context, reporter, reportID string, at time.Time, recs []UsageRecord) (applied bool, err error)
	// Usage returns the usage of hours starting at or after since, of one
	// tenant or (tenantID "") of every tenant, by hour, then tenant id.
	Usage(ctx context.Context, tenantID string, since time.Time) ([]UsageRecord, error)
	// ArchiveBytes is the total size of a tenant's game archives.
	ArchiveBytes(ctx context.Context, tenantID string) (int64, error)

	// ListSigningKeys returns every stored signing key.
	ListSigningKeys(ctx context.Context) ([]SigningKey, error)
	// PutSigningKeys inserts or replaces keys (by id), atomically.
	PutSigningKeys(ctx context.Context, keys ...SigningKey) error
	// DeleteSigningKeys deletes keys by id; unknown ids are ignored.
	DeleteSigningKeys(ctx context.Context, ids ...string) error

	// Close releases the store's resources.
	Close() error
}
