#!/usr/bin/env bash
# Rebuilds the game modules embedded by games/builtin. The build is
# reproducible (-trimpath, empty build id, no VCS stamp), so the committed
# .wasm files can be checked against the sources: games/builtin's tests rebuild
# with exactly these flags and fail if the bytes differ.
#
# Usage, from anywhere: bash games/build.sh
set -euo pipefail

cd "$(dirname "$0")/.."

GOOS=wasip1 GOARCH=wasm GOFLAGS= go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags=-buildid= \
	-o games/builtin/arena.wasm ./games/arena/module

echo "games/builtin/arena.wasm: $(wc -c <games/builtin/arena.wasm) bytes, sha256 $(sha256sum games/builtin/arena.wasm | cut -d' ' -f1)"
