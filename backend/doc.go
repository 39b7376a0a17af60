// Package backend is the Ludus control-plane service: tenants, player accounts,
// session tickets, API keys and game modules. It is stateless: everything lives
// in a store.Store (SQLite, see store/sqlite, or PostgreSQL, see
// store/postgres), so several instances can share one PostgreSQL database.
// docs/BACKEND.md describes accounts, sessions, progression, match results,
// webhooks and API key scopes.
//
// A Server serves over HTTP (Server.Handler):
//
//   - ludus.v1.AuthService: GuestLogin signs a player in with a device id and
//     returns a session ticket (package auth) valid for 120 s.
//   - ludus.v1.AdminService: for studios' backends and operators, with an API
//     key in "Authorization: Bearer <key>".
//   - ludus.cluster.v1.ModuleStoreService: for sim nodes and gateways, with
//     "Authorization: Bearer <credential>": the cluster token (gateways: all
//     of it, including minting match-scoped credentials and registering
//     match rosters) or a sim node's own node credential (package
//     auth/clustercred: modules and game archives only; the node credential
//     also reports usage (QuotaClusterService) and plays batch games
//     (BatchWorkerService)).
//   - ludus.v1.ProgressionService: players' progression and leaderboards
//     (session ticket).
//   - ludus.v1.MatchReportService: sim nodes report a match's progress and
//     result with its credential (see MatchReporter).
//   - GET /.well-known/jwks.json: the public ticket keys (RFC 8037 JWK set),
//     which gateways fetch with auth.JWKSClient.
//
// # Credentials
//
// The operator key (Config.OperatorKey) manages tenants. Each tenant gets an
// admin API key when it is created: "lds_" followed by 32 random bytes in
// base64url, shown once. Keys are stored as their SHA-256 hash with the tenant
// and a scope: "admin", "server" or "read-only" (see ScopeAdmin). A fast hash is the right tool here:
// slow password hashes (argon2, bcrypt) exist to make guessing low-entropy
// human passwords expensive, but a 256-bit random key cannot be guessed, so
// SHA-256 loses nothing, and it lets a key be found by an indexed lookup of its
// hash on every call instead of costing tens of milliseconds of CPU per
// request. The operator key and cluster token are compared in constant time.
//
// # Ids
//
// Records get random ids of 16 bytes (128 bits) in lowercase unpadded base32,
// with a prefix naming the kind: "t_" tenants, "a_" accounts, "k_" API keys.
// They are URL-safe and case-insensitive-safe. Module build ids are the
// lowercase hex SHA-256 of the module bytes; signing key ids are RFC 7638
// thumbprints.
//
// # Errors
//
// RPCs answer with Connect codes and messages a person can act on. Store
// failures are logged and answered with Internal "internal error": SQL never
// reaches a client.
package backend
