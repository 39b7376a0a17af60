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
}
