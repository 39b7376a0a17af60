package sqlite

// migrations is the schema history: migrations[i] brings the schema to
// version i+1. Never edit an applied migration; append a new one.
//
// Times are INTEGER microseconds since the Unix epoch, UTC. In modules the
// wasm BLOB is the last column: SQLite reads a row's columns in order, so
// columns after a large BLOB would drag its overflow pages into every listing.
var migrations = [][]string{
	// Version 1: walking skeleton.
	{
		`CREATE TABLE tenants (
			id         TEXT    PRIMARY KEY,
			slug       TEXT    NOT NULL UNIQUE,
			name       TEXT    NOT NULL,
			created_at INTEGER NOT NULL
		) STRICT`,
		`CREATE TABLE api_keys (
			id         TEXT    PRIMARY KEY,
			tenant_id  TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			hash       BLOB    NOT NULL UNIQUE,
			scope      TEXT    NOT NULL,
			created_at INTEGER NOT NULL
		) STRICT`,
		`CREATE INDEX api_keys_tenant ON api_keys(tenant_id)`,
		`CREATE TABLE accounts (
			id           TEXT    PRIMARY KEY,
			tenant_id    TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			device_id    TEXT,
			display_name TEXT    NOT NULL,
			created_at   INTEGER NOT NULL,
			updated_at   INTEGER NOT NULL,
			UNIQUE (tenant_id, device_id)
		) STRICT`,
		`CREATE TABLE modules (
			tenant_id     TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			name          TEXT    NOT NULL,
			build_id      TEXT    NOT NULL,
			abi_version   INTEGER NOT NULL,
			meta_name     TEXT    NOT NULL,
			tick_rate     INTEGER NOT NULL,
			max_players   INTEGER NOT NULL,
			frame_divisor INTEGER NOT NULL,
			view_format   TEXT    NOT NULL,
			view_width    INTEGER NOT NULL,
			view_height   INTEGER NOT NULL,
			size_bytes    INTEGER NOT NULL,
			created_at    INTEGER NOT NULL,
			uploaded_at   INTEGER NOT NULL,
			seq           INTEGER NOT NULL,
			wasm          BLOB    NOT NULL,
			PRIMARY KEY (tenant_id, name, build_id)
		) STRICT`,
		`CREATE INDEX modules_by_name ON modules(tenant_id, name, seq)`,
		`CREATE INDEX modules_by_build ON modules(tenant_id, build_id, seq)`,
		`CREATE INDEX modules_by_seq ON modules(tenant_id, seq)`,
		`CREATE TABLE signing_keys (
			id          TEXT    PRIMARY KEY,
			private_key BLOB    NOT NULL,
			created_at  INTEGER NOT NULL,
			retired_at  INTEGER
		) STRICT`,
	},
	// Version 2: key scopes and names, email/password and custom-id
	// accounts, login throttling, refresh tokens, progression, matches,
	// leaderboards, webhooks.
	{
		`ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE accounts ADD COLUMN email TEXT`,
		`ALTER TABLE accounts ADD COLUMN password_hash TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE accounts ADD COLUMN custom_id TEXT`,
		`CREATE UNIQUE INDEX accounts_email ON accounts(tenant_id, email)`,
		`CREATE UNIQUE INDEX accounts_custom_id ON accounts(tenant_id, custom_id)`,
		`CREATE TABLE login_throttles (
			tenant_id    TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			key          TEXT    NOT NULL,
			failures     INTEGER NOT NULL,
			last_failure INTEGER NOT NULL,
			locked_until INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, key)
		) STRICT`,
		`CREATE TABLE refresh_tokens (
			hash       BLOB    PRIMARY KEY,
			family_id  TEXT    NOT NULL,
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			created_at INTEGER NOT NULL,
			expires_at INTEGER NOT NULL,
			used_at    INTEGER,
			revoked    INTEGER NOT NULL
		) STRICT`,
		`CREATE INDEX refresh_tokens_family ON refresh_tokens(family_id)`,
		`CREATE INDEX refresh_tokens_account ON refresh_tokens(account_id)`,
		`CREATE TABLE changes_applied (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			key        TEXT    NOT NULL,
			at         INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, account_id, key)
		) STRICT`,
		`CREATE INDEX changes_applied_account ON changes_applied(account_id)`,
		`CREATE TABLE progression (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			xp         INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, account_id)
		) STRICT`,
		`CREATE INDEX progression_account ON progression(account_id)`,
		`CREATE TABLE wallet (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			currency   TEXT    NOT NULL,
			balance    INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, account_id, currency)
		) STRICT`,
		`CREATE INDEX wallet_account ON wallet(account_id)`,
		`CREATE TABLE ledger (
			seq        INTEGER PRIMARY KEY AUTOINCREMENT,
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			currency   TEXT    NOT NULL,
			delta      INTEGER NOT NULL,
			balance    INTEGER NOT NULL,
			key        TEXT    NOT NULL,
			reason     TEXT    NOT NULL,
			at         INTEGER NOT NULL
		) STRICT`,
		`CREATE INDEX ledger_account ON ledger(tenant_id, account_id, seq)`,
		`CREATE INDEX ledger_account_fk ON ledger(account_id)`,
		`CREATE TABLE inventory (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			item       TEXT    NOT NULL,
			quantity   INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, account_id, item)
		) STRICT`,
		`CREATE INDEX inventory_account ON inventory(account_id)`,
		`CREATE TABLE matches (
			tenant_id       TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			id              TEXT    NOT NULL,
			game            TEXT    NOT NULL,
			credential_hash BLOB    NOT NULL UNIQUE,
			created_at      INTEGER NOT NULL,
			expires_at      INTEGER NOT NULL,
			ended_at        INTEGER,
			last_seq        INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, id)
		) STRICT`,
		`CREATE INDEX matches_ended ON matches(tenant_id, ended_at)`,
		`CREATE TABLE match_players (
			tenant_id   TEXT    NOT NULL,
			match_id    TEXT    NOT NULL,
			account_id  TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			score       INTEGER NOT NULL,
			duration_ms INTEGER NOT NULL,
			damage      INTEGER NOT NULL,
			items_used  TEXT    NOT NULL,
			xp          INTEGER NOT NULL,
			currency    TEXT    NOT NULL,
			items       TEXT    NOT NULL,
			PRIMARY KEY (tenant_id, match_id, account_id),
			FOREIGN KEY (tenant_id, match_id) REFERENCES matches(tenant_id, id) ON DELETE CASCADE
		) STRICT`,
		`CREATE INDEX match_players_account ON match_players(account_id)`,
		`CREATE TABLE leaderboard (
			tenant_id  TEXT    NOT NULL,
			game       TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			best       INTEGER NOT NULL,
			total      INTEGER NOT NULL,
			matches    INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, game, account_id)
		) STRICT`,
		`CREATE INDEX leaderboard_best ON leaderboard(tenant_id, game, best DESC, account_id)`,
		`CREATE INDEX leaderboard_total ON leaderboard(tenant_id, game, total DESC, account_id)`,
		`CREATE INDEX leaderboard_account ON leaderboard(account_id)`,
		`CREATE TABLE webhooks (
			tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			url       TEXT NOT NULL,
			secret    BLOB NOT NULL
		) STRICT`,
		`CREATE TABLE webhook_deliveries (
			id         TEXT    PRIMARY KEY,
			tenant_id  TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			event      TEXT    NOT NULL,
			payload    BLOB    NOT NULL,
			state      TEXT    NOT NULL,
			attempts   INTEGER NOT NULL,
			next_at    INTEGER NOT NULL,
			last_error TEXT    NOT NULL,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL
		) STRICT`,
		`CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_at)`,
		`CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries(tenant_id, created_at)`,
	},
	// Version 3: the game log archive. Blobs last (see above); chunks in
	// their own rows, so listing archives reads none of them.
	{
		`CREATE TABLE game_archives (
			tenant_id   TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			game_id     TEXT    NOT NULL,
			state       TEXT    NOT NULL,
			message     TEXT    NOT NULL,
			final_tick  INTEGER NOT NULL,
			size_bytes  INTEGER NOT NULL,
			chunks      INTEGER NOT NULL,
			archived_at INTEGER NOT NULL,
			spec_json   BLOB    NOT NULL,
			PRIMARY KEY (tenant_id, game_id)
		) STRICT`,
		`CREATE INDEX game_archives_recent ON game_archives(tenant_id, archived_at)`,
		`CREATE TABLE game_archive_chunks (
			tenant_id TEXT    NOT NULL,
			game_id   TEXT    NOT NULL,
			seq       INTEGER NOT NULL,
			data      BLOB    NOT NULL,
			PRIMARY KEY (tenant_id, game_id, seq),
			FOREIGN KEY (tenant_id, game_id) REFERENCES game_archives(tenant_id, game_id) ON DELETE CASCADE
		) STRICT`,
	},
	// Version 4: match rosters, the accounts a match's credential may
	// credit. No reference to accounts: a deleted account stays on the
	// rosters it was on, so its match's result still applies to the others.
	{
		`CREATE TABLE match_roster (
			tenant_id  TEXT    NOT NULL,
			match_id   TEXT    NOT NULL,
			account_id TEXT    NOT NULL,
			added_at   INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, match_id, account_id),
			FOREIGN KEY (tenant_id, match_id) REFERENCES matches(tenant_id, id) ON DELETE CASCADE
		) STRICT`,
	},
	// Version 5: what match results carry beyond the score (stats, place,
	// team), the tenants' result rules, and ratings per game mode.
	{
		`ALTER TABLE match_players ADD COLUMN stats TEXT NOT NULL DEFAULT '{}'`,
		`ALTER TABLE match_players ADD COLUMN place INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE match_players ADD COLUMN team INTEGER NOT NULL DEFAULT 0`,
		`CREATE TABLE result_rules (
			tenant_id TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			seq       INTEGER NOT NULL,
			game      TEXT    NOT NULL,
			stat      TEXT    NOT NULL,
			kind      TEXT    NOT NULL,
			target    TEXT    NOT NULL,
			per_unit  INTEGER NOT NULL,
			cap       INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, seq)
		) STRICT`,
		`CREATE TABLE ratings (
			tenant_id  TEXT    NOT NULL,
			mode       TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			rating     REAL    NOT NULL,
			rd         REAL    NOT NULL,
			volatility REAL    NOT NULL,
			matches    INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, mode, account_id)
		) STRICT`,
		`CREATE INDEX ratings_account ON ratings(account_id)`,
	},
	// Version 6: batch runs (package batch): run records, one result per
	// game (the primary key keeps the first), and per-tenant batch settings
	// (archive link key, retention, spend cap). Blobs last.
	{
		`CREATE TABLE batch_runs (
			tenant_id  TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			run_id     TEXT    NOT NULL,
			state      TEXT    NOT NULL,
			reason     TEXT    NOT NULL,
			games      INTEGER NOT NULL,
			done       INTEGER NOT NULL,
			cpu_ns     INTEGER NOT NULL,
			created_at INTEGER NOT NULL,
			ended_at   INTEGER,
			expires_at INTEGER NOT NULL,
			spec       BLOB    NOT NULL,
			PRIMARY KEY (tenant_id, run_id)
		) STRICT`,
		`CREATE INDEX batch_runs_expiry ON batch_runs(expires_at)`,
		`CREATE TABLE batch_results (
			tenant_id TEXT    NOT NULL,
			run_id    TEXT    NOT NULL,
			game      INTEGER NOT NULL,
			map       TEXT    NOT NULL,
			seed      INTEGER NOT NULL,
			side      INTEGER NOT NULL,
			winner    INTEGER NOT NULL,
			ticks     INTEGER NOT NULL,
			ended     INTEGER NOT NULL,
			timed_out INTEGER NOT NULL,
			cpu_ns    INTEGER NOT NULL,
			error     TEXT    NOT NULL,
			worker    TEXT    NOT NULL,
			stored_at INTEGER NOT NULL,
			result    BLOB    NOT NULL,
			log       BLOB    NOT NULL,
			PRIMARY KEY (tenant_id, run_id, game),
			FOREIGN KEY (tenant_id, run_id) REFERENCES batch_runs(tenant_id, run_id) ON DELETE CASCADE
		) STRICT`,
		`CREATE INDEX batch_results_stored ON batch_results(tenant_id, run_id, stored_at)`,
		`CREATE TABLE batch_settings (
			tenant_id    TEXT    PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			retention_us INTEGER NOT NULL,
			cap_cpu_ns   INTEGER NOT NULL,
			link_key     BLOB    NOT NULL
		) STRICT`,
	},
	// Version 7: tenant quotas and metered usage (issue 14); usage_reports
	// makes each usage report count once.
	{
		`CREATE TABLE tenant_quotas (
			tenant_id            TEXT    PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			live_games           INTEGER NOT NULL,
			games_per_minute     INTEGER NOT NULL,
			cpu_seconds_per_hour INTEGER NOT NULL,
			archive_bytes        INTEGER NOT NULL,
			max_game_duration_s  INTEGER NOT NULL,
			updated_at           INTEGER NOT NULL
		) STRICT`,
		`CREATE TABLE tenant_usage (
			tenant_id       TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			hour            INTEGER NOT NULL,
			cpu_micros      INTEGER NOT NULL,
			player_millis   INTEGER NOT NULL,
			stream_bytes    INTEGER NOT NULL,
			etcd_writes     INTEGER NOT NULL,
			archive_bytes   INTEGER NOT NULL,
			games_timed_out INTEGER NOT NULL,
			PRIMARY KEY (tenant_id, hour)
		) STRICT`,
		`CREATE INDEX tenant_usage_hour ON tenant_usage(hour)`,
		`CREATE TABLE usage_reports (
			reporter  TEXT    NOT NULL,
			report_id TEXT    NOT NULL,
			at        INTEGER NOT NULL,
			PRIMARY KEY (reporter, report_id)
		) STRICT`,
		`CREATE INDEX usage_reports_at ON usage_reports(at)`,
	},
	// Version 8: the guest log (what the module printed) kept with an archive.
	{
		`ALTER TABLE game_archives ADD COLUMN guest_log BLOB NOT NULL DEFAULT x''`,
	},
	// Version 9: the email and custom-id indexes hold only the accounts
	// that have one. A NULL never conflicts, so uniqueness is unchanged, and
	// the lookups (email = ?, custom_id = ?) imply IS NOT NULL; but guest
	// accounts, most of them, no longer add an entry to each index.
	{
		`DROP INDEX accounts_email`,
		`CREATE UNIQUE INDEX accounts_email ON accounts(tenant_id, email) WHERE email IS NOT NULL`,
		`DROP INDEX accounts_custom_id`,
		`CREATE UNIQUE INDEX accounts_custom_id ON accounts(tenant_id, custom_id) WHERE custom_id IS NOT NULL`,
	},
	// Version 10: expired refresh tokens are deleted (by expires_at), and a
	// family is revoked by (account_id, family_id), one index that also
	// finds an account's tokens when it is deleted, where there were two.
	{
		`CREATE INDEX refresh_tokens_account_family ON refresh_tokens(account_id, family_id)`,
		`CREATE INDEX refresh_tokens_expiry ON refresh_tokens(expires_at)`,
		`DROP INDEX refresh_tokens_family`,
		`DROP INDEX refresh_tokens_account`,
	},
	// Version 11: matches that never reported, found by when their
	// credential expires (after which none can), for the sweep that deletes
	// them. Partial: a match leaves it with its first report.
	{
		`CREATE INDEX matches_unreported ON matches(expires_at) WHERE last_seq = 0 AND ended_at IS NULL`,
	},
	// Version 12: the bytes of a batch run's stored results, counted as
	// they are stored, for the run's byte bound (runs stored before count
	// from 0).
	{
		`ALTER TABLE batch_runs ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0`,
	},
	// Version 13: the rosters an account is on, for its export: the primary
	// key leads with the match, so without this index they are found only
	// by reading every roster of the tenant.
	{
		`CREATE INDEX match_roster_account ON match_roster(tenant_id, account_id)`,
	},
}
