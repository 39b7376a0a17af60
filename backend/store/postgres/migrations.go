package postgres

// migrations is the schema history: migrations[i] brings the schema to
// version i+1. Never edit an applied migration; append a new one. Tables and
// columns are those of the SQLite store (package sqlite), in PostgreSQL
// types: times are BIGINT microseconds since the Unix epoch, UTC.
var migrations = [][]string{
	// Version 1: everything up to SQLite schema version 2.
	{
		`CREATE TABLE tenants (
			id         TEXT    PRIMARY KEY,
			slug       TEXT    NOT NULL UNIQUE,
			name       TEXT    NOT NULL,
			created_at BIGINT  NOT NULL
		)`,
		`CREATE TABLE api_keys (
			id         TEXT    PRIMARY KEY,
			tenant_id  TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			hash       BYTEA    NOT NULL UNIQUE,
			scope      TEXT    NOT NULL,
			name       TEXT    NOT NULL DEFAULT '',
			created_at BIGINT  NOT NULL
		)`,
		`CREATE INDEX api_keys_tenant ON api_keys(tenant_id)`,
		`CREATE TABLE accounts (
			id           TEXT    PRIMARY KEY,
			tenant_id    TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			device_id    TEXT,
			email         TEXT,
			password_hash TEXT NOT NULL DEFAULT '',
			custom_id     TEXT,
			display_name TEXT    NOT NULL,
			created_at   BIGINT  NOT NULL,
			updated_at   BIGINT  NOT NULL,
			UNIQUE (tenant_id, device_id)
		)`,
		`CREATE TABLE modules (
			tenant_id     TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			name          TEXT    NOT NULL,
			build_id      TEXT    NOT NULL,
			abi_version   BIGINT  NOT NULL,
			meta_name     TEXT    NOT NULL,
			tick_rate     BIGINT  NOT NULL,
			max_players   BIGINT  NOT NULL,
			frame_divisor BIGINT  NOT NULL,
			view_format   TEXT    NOT NULL,
			view_width    BIGINT  NOT NULL,
			view_height   BIGINT  NOT NULL,
			size_bytes    BIGINT  NOT NULL,
			created_at    BIGINT  NOT NULL,
			uploaded_at   BIGINT  NOT NULL,
			seq           BIGINT  NOT NULL,
			wasm          BYTEA    NOT NULL,
			PRIMARY KEY (tenant_id, name, build_id)
		)`,
		`CREATE INDEX modules_by_name ON modules(tenant_id, name, seq)`,
		`CREATE INDEX modules_by_build ON modules(tenant_id, build_id, seq)`,
		`CREATE INDEX modules_by_seq ON modules(tenant_id, seq)`,
		`CREATE TABLE signing_keys (
			id          TEXT    PRIMARY KEY,
			private_key BYTEA    NOT NULL,
			created_at  BIGINT  NOT NULL,
			retired_at  BIGINT 
		)`,
		`CREATE UNIQUE INDEX accounts_email ON accounts(tenant_id, email)`,
		`CREATE UNIQUE INDEX accounts_custom_id ON accounts(tenant_id, custom_id)`,
		`CREATE TABLE login_throttles (
			tenant_id    TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			key          TEXT    NOT NULL,
			failures     BIGINT  NOT NULL,
			last_failure BIGINT  NOT NULL,
			locked_until BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, key)
		)`,
		`CREATE TABLE refresh_tokens (
			hash       BYTEA    PRIMARY KEY,
			family_id  TEXT    NOT NULL,
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			created_at BIGINT  NOT NULL,
			expires_at BIGINT  NOT NULL,
			used_at    BIGINT ,
			revoked    BIGINT  NOT NULL
		)`,
		`CREATE INDEX refresh_tokens_family ON refresh_tokens(family_id)`,
		`CREATE INDEX refresh_tokens_account ON refresh_tokens(account_id)`,
		`CREATE TABLE changes_applied (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			key        TEXT    NOT NULL,
			at         BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, account_id, key)
		)`,
		`CREATE INDEX changes_applied_account ON changes_applied(account_id)`,
		`CREATE TABLE progression (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			xp         BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, account_id)
		)`,
		`CREATE INDEX progression_account ON progression(account_id)`,
		`CREATE TABLE wallet (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			currency   TEXT    NOT NULL,
			balance    BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, account_id, currency)
		)`,
		`CREATE INDEX wallet_account ON wallet(account_id)`,
		`CREATE TABLE ledger (
			seq        BIGSERIAL PRIMARY KEY,
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			currency   TEXT    NOT NULL,
			delta      BIGINT  NOT NULL,
			balance    BIGINT  NOT NULL,
			key        TEXT    NOT NULL,
			reason     TEXT    NOT NULL,
			at         BIGINT  NOT NULL
		)`,
		`CREATE INDEX ledger_account ON ledger(tenant_id, account_id, seq)`,
		`CREATE INDEX ledger_account_fk ON ledger(account_id)`,
		`CREATE TABLE inventory (
			tenant_id  TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			item       TEXT    NOT NULL,
			quantity   BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, account_id, item)
		)`,
		`CREATE INDEX inventory_account ON inventory(account_id)`,
		`CREATE TABLE matches (
			tenant_id       TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			id              TEXT    NOT NULL,
			game            TEXT    NOT NULL,
			credential_hash BYTEA    NOT NULL UNIQUE,
			created_at      BIGINT  NOT NULL,
			expires_at      BIGINT  NOT NULL,
			ended_at        BIGINT ,
			last_seq        BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, id)
		)`,
		`CREATE INDEX matches_ended ON matches(tenant_id, ended_at)`,
		`CREATE TABLE match_players (
			tenant_id   TEXT    NOT NULL,
			match_id    TEXT    NOT NULL,
			account_id  TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			score       BIGINT  NOT NULL,
			duration_ms BIGINT  NOT NULL,
			damage      BIGINT  NOT NULL,
			items_used  TEXT    NOT NULL,
			xp          BIGINT  NOT NULL,
			currency    TEXT    NOT NULL,
			items       TEXT    NOT NULL,
			PRIMARY KEY (tenant_id, match_id, account_id),
			FOREIGN KEY (tenant_id, match_id) REFERENCES matches(tenant_id, id) ON DELETE CASCADE
		)`,
		`CREATE INDEX match_players_account ON match_players(account_id)`,
		`CREATE TABLE leaderboard (
			tenant_id  TEXT    NOT NULL,
			game       TEXT    NOT NULL,
			account_id TEXT    NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			best       BIGINT  NOT NULL,
			total      BIGINT  NOT NULL,
			matches    BIGINT  NOT NULL,
			PRIMARY KEY (tenant_id, game, account_id)
		)`,
		`CREATE INDEX leaderboard_best ON leaderboard(tenant_id, game, best DESC, account_id)`,
		`CREATE INDEX leaderboard_total ON leaderboard(tenant_id, game, total DESC, account_id)`,
		`CREATE INDEX leaderboard_account ON leaderboard(account_id)`,
		`CREATE TABLE webhooks (
			tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			url       TEXT NOT NULL,
			secret    BYTEA NOT NULL
		)`,
		`CREATE TABLE webhook_deliveries (
			id         TEXT    PRIMARY KEY,
			tenant_id  TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			event      TEXT    NOT NULL,
			payload    BYTEA    NOT NULL,
			state      TEXT    NOT NULL,
			attempts   BIGINT  NOT NULL,
			next_at    BIGINT  NOT NULL,
			last_error TEXT    NOT NULL,
			created_at BIGINT  NOT NULL,
			updated_at BIGINT  NOT NULL
		)`,
		`CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_at)`,
		`CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries(tenant_id, created_at)`,
	},
	// Version 2 (SQLite version 3): the game log archive.
	{
		`CREATE TABLE game_archives (
			tenant_id   TEXT   NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			game_id     TEXT   NOT NULL,
			state       TEXT   NOT NULL,
			message     TEXT   NOT NULL,
			final_tick  BIGINT NOT NULL,
			size_bytes  BIGINT NOT NULL,
			chunks      BIGINT NOT NULL,
			archived_at BIGINT NOT NULL,
			spec_json   BYTEA  NOT NULL,
			PRIMARY KEY (tenant_id, game_id)
		)`,
		`CREATE INDEX game_archives_recent ON game_archives(tenant_id, archived_at)`,
		`CREATE TABLE game_archive_chunks (
			tenant_id TEXT   NOT NULL,
			game_id   TEXT   NOT NULL,
			seq       BIGINT NOT NULL,
			data      BYTEA  NOT NULL,
			PRIMARY KEY (tenant_id, game_id, seq),
			FOREIGN KEY (tenant_id, game_id) REFERENCES game_archives(tenant_id, game_id) ON DELETE CASCADE
		)`,
	},
	// Version 3 (SQLite version 4): match rosters.
	{
		`CREATE TABLE match_roster (
			tenant_id  TEXT   NOT NULL,
			match_id   TEXT   NOT NULL,
			account_id TEXT   NOT NULL,
			added_at   BIGINT NOT NULL,
			PRIMARY KEY (tenant_id, match_id, account_id),
			FOREIGN KEY (tenant_id, match_id) REFERENCES matches(tenant_id, id) ON DELETE CASCADE
		)`,
	},
	// Version 4 (SQLite version 5): result stats, place and team; result
	// rules; ratings.
	{
		`ALTER TABLE match_players ADD COLUMN stats TEXT NOT NULL DEFAULT '{}'`,
		`ALTER TABLE match_players ADD COLUMN place BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE match_players ADD COLUMN team BIGINT NOT NULL DEFAULT 0`,
		`CREATE TABLE result_rules (
			tenant_id TEXT   NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			seq       BIGINT NOT NULL,
			game      TEXT   NOT NULL,
			stat      TEXT   NOT NULL,
			kind      TEXT   NOT NULL,
			target    TEXT   NOT NULL,
			per_unit  BIGINT NOT NULL,
			cap       BIGINT NOT NULL,
			PRIMARY KEY (tenant_id, seq)
		)`,
		`CREATE TABLE ratings (
			tenant_id  TEXT             NOT NULL,
			mode       TEXT             NOT NULL,
			account_id TEXT             NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
			rating     DOUBLE PRECISION NOT NULL,
			rd         DOUBLE PRECISION NOT NULL,
			volatility DOUBLE PRECISION NOT NULL,
			matches    BIGINT           NOT NULL,
			updated_at BIGINT           NOT NULL,
			PRIMARY KEY (tenant_id, mode, account_id)
		)`,
		`CREATE INDEX ratings_account ON ratings(account_id)`,
	},
	// Version 5 (SQLite version 6): batch runs, their results, batch settings.
	{
		`CREATE TABLE batch_runs (
			tenant_id  TEXT   NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			run_id     TEXT   NOT NULL,
			state      TEXT   NOT NULL,
			reason     TEXT   NOT NULL,
			games      BIGINT NOT NULL,
			done       BIGINT NOT NULL,
			cpu_ns     BIGINT NOT NULL,
			created_at BIGINT NOT NULL,
			ended_at   BIGINT,
			expires_at BIGINT NOT NULL,
			spec       BYTEA  NOT NULL,
			PRIMARY KEY (tenant_id, run_id)
		)`,
		`CREATE INDEX batch_runs_expiry ON batch_runs(expires_at)`,
		`CREATE TABLE batch_results (
			tenant_id TEXT   NOT NULL,
			run_id    TEXT   NOT NULL,
			game      BIGINT NOT NULL,
			map       TEXT   NOT NULL,
			seed      BIGINT NOT NULL,
			side      BIGINT NOT NULL,
			winner    BIGINT NOT NULL,
			ticks     BIGINT NOT NULL,
			ended     BIGINT NOT NULL,
			timed_out BIGINT NOT NULL,
			cpu_ns    BIGINT NOT NULL,
			error     TEXT   NOT NULL,
			worker    TEXT   NOT NULL,
			stored_at BIGINT NOT NULL,
			result    BYTEA  NOT NULL,
			log       BYTEA  NOT NULL,
			PRIMARY KEY (tenant_id, run_id, game),
			FOREIGN KEY (tenant_id, run_id) REFERENCES batch_runs(tenant_id, run_id) ON DELETE CASCADE
		)`,
		`CREATE INDEX batch_results_stored ON batch_results(tenant_id, run_id, stored_at)`,
		`CREATE TABLE batch_settings (
			tenant_id    TEXT   PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			retention_us BIGINT NOT NULL,
			cap_cpu_ns   BIGINT NOT NULL,
			link_key     BYTEA  NOT NULL
		)`,
	},
	// Version 6 (SQLite version 7): tenant quotas and metered usage;
	// usage_reports makes each usage report count once.
	{
		`CREATE TABLE tenant_quotas (
			tenant_id            TEXT    PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
			live_games           BIGINT NOT NULL,
			games_per_minute     BIGINT NOT NULL,
			cpu_seconds_per_hour BIGINT NOT NULL,
			archive_bytes        BIGINT NOT NULL,
			max_game_duration_s  BIGINT NOT NULL,
			updated_at           BIGINT NOT NULL
		)`,
		`CREATE TABLE tenant_usage (
			tenant_id       TEXT    NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
			hour            BIGINT NOT NULL,
			cpu_micros      BIGINT NOT NULL,
			player_millis   BIGINT NOT NULL,
			stream_bytes    BIGINT NOT NULL,
			etcd_writes     BIGINT NOT NULL,
			archive_bytes   BIGINT NOT NULL,
			games_timed_out BIGINT NOT NULL,
			PRIMARY KEY (tenant_id, hour)
		)`,
		`CREATE INDEX tenant_usage_hour ON tenant_usage(hour)`,
		`CREATE TABLE usage_reports (
			reporter  TEXT    NOT NULL,
			report_id TEXT    NOT NULL,
			at        BIGINT NOT NULL,
			PRIMARY KEY (reporter, report_id)
		)`,
		`CREATE INDEX usage_reports_at ON usage_reports(at)`,
	},
	// Version 7 (SQLite version 8): the guest log kept with an archive.
	{
		`ALTER TABLE game_archives ADD COLUMN guest_log BYTEA NOT NULL DEFAULT ''`,
	},
	// Version 8 (SQLite version 9): the email and custom-id indexes hold
	// only the accounts that have one (see SQLite's). Per guest login that
	// is two index entries and two WAL records fewer (about 2 of 12.8, and
	// 200 of 1,400 WAL bytes, measured with the backend bench). The new
	// indexes are built before the old ones are dropped: the build holds
	// writes to accounts (0.3 s for a million accounts), not reads; the
	// drops take the table's exclusive lock only at the end.
	{
		`CREATE UNIQUE INDEX accounts_email_partial ON accounts(tenant_id, email) WHERE email IS NOT NULL`,
		`CREATE UNIQUE INDEX accounts_custom_id_partial ON accounts(tenant_id, custom_id) WHERE custom_id IS NOT NULL`,
		`DROP INDEX accounts_email`,
		`DROP INDEX accounts_custom_id`,
		`ALTER INDEX accounts_email_partial RENAME TO accounts_email`,
		`ALTER INDEX accounts_custom_id_partial RENAME TO accounts_custom_id`,
	},
	// Version 9 (SQLite version 10): expired refresh tokens are deleted
	// (by expires_at), and a family is revoked by (account_id, family_id):
	// one index that also finds an account's tokens when it is deleted,
	// where there were two. A login still writes three index entries for
	// its token, one of them now at the end of an index in time order.
	{
		`CREATE INDEX refresh_tokens_account_family ON refresh_tokens(account_id, family_id)`,
		`CREATE INDEX refresh_tokens_expiry ON refresh_tokens(expires_at)`,
		`DROP INDEX refresh_tokens_family`,
		`DROP INDEX refresh_tokens_account`,
	},
	// Version 10 (SQLite version 11): matches that never reported, found by when their
	// credential expires (after which none can), for the sweep that deletes
	// them. Partial: a match leaves it with its first report.
	{
		`CREATE INDEX matches_unreported ON matches(expires_at) WHERE last_seq = 0 AND ended_at IS NULL`,
	},
	// Version 11 (SQLite version 12): the bytes of a batch run's stored
	// results, counted as they are stored, for the run's byte bound.
	{
		`ALTER TABLE batch_runs ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0`,
	},
	// Version 12 (SQLite version 13): the rosters an account is on, for its
	// export (see SQLite's). Built in the migration's transaction: while it
	// runs, writes to match_roster (AddMatchPlayers) wait; reads do not.
	{
		`CREATE INDEX match_roster_account ON match_roster(tenant_id, account_id)`,
	},
}
