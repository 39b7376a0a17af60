#!/usr/bin/env bash
# The whole Ludus test suite: what the README's second command and CI run.
#
#   bash scripts/test.sh
#
# It installs what the tests need when it is missing (npm packages in web/;
# Debian's chromium when running as root), then checks, in order:
#   1. the API contract lints and the committed generated code (Go + TypeScript)
#      is what buf generates from it;
#   2. the committed web bundle is what web/build.mjs builds from the sources,
#      and the TypeScript type-checks;
#   3. gofmt and go vet are clean;
#   4. go test -race ./... (including the browser test in headless Chromium and
#      the check that games/builtin/*.wasm match their sources).
# Extra arguments go to go test (e.g. -run TestDeterminism).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-}"

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
if [ ! -x web/node_modules/.bin/buf ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
	(cd web && npm ci --no-audit --no-fund)
fi
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

step "buf lint and generated code"
web/node_modules/.bin/buf lint
web/node_modules/.bin/buf generate -o "$tmp/gen-check"
if ! diff -r gen "$tmp/gen-check/gen" || ! diff -r web/src/gen "$tmp/gen-check/web/src/gen"; then
	echo "generated code is stale: run 'web/node_modules/.bin/buf generate' and commit the result" >&2
	exit 1
fi

step "web bundle and type check"
(cd web && LUDUS_WEB_OUT="$tmp/web-dist" node build.mjs && node_modules/.bin/tsc --noEmit -p .)
if ! diff -r web/dist "$tmp/web-dist"; then
	echo "web/dist is stale: run 'cd web && npm run build' and commit the result" >&2
	exit 1
fi

step "gofmt and go vet"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './web/node_modules/*'))"
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
GOOS=wasip1 GOARCH=wasm go vet ./sdk/... ./games/arena/...

# --- PostgreSQL for the backend store tests (owned by backend/) -------------
# A throwaway cluster on 127.0.0.1 in a temp dir, for LUDUS_TEST_POSTGRES.
# Skipped when LUDUS_TEST_POSTGRES is already set (e.g. an external server).
pg_stop() { :; }
if [ -z "${LUDUS_TEST_POSTGRES:-}" ]; then
	step "postgresql"
	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	fi
	pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
	if [ -n "$pg_bin" ]; then
		pg_dir="$(mktemp -d /tmp/ludus-pg.XXXXXX)"
		pg_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 55432)"
		as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
		pg_user="$(if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi)"
		[ "$(id -u)" = 0 ] && chown postgres "$pg_dir"
		as_pg "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U "$pg_user" --no-sync >/dev/null
		as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -o "-k $pg_dir -h 127.0.0.1 -p $pg_port -F -c fsync=off -c max_connections=200" start >/dev/null
		pg_stop() { as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$pg_dir"; }
		export LUDUS_TEST_POSTGRES="postgres://$pg_user@127.0.0.1:$pg_port/postgres?sslmode=disable"
		echo "PostgreSQL on 127.0.0.1:$pg_port ($pg_bin)"
	else
		echo "PostgreSQL not installed: PostgreSQL store tests will skip (or fail under CI)" >&2
	fi
fi
trap 'pg_stop; rm -rf "$tmp"' EXIT
# --- end PostgreSQL --------------------------------------------------------

step "go test -race"
# -p 1: one test binary at a time. The suite runs real etcd leases with
# second-scale TTLs; on a 2-core machine, parallel -race binaries starve them.
go test -race -p 1 -timeout 40m "$@" ./...
