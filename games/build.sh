#!/usr/bin/env bash
# Rebuilds the game modules embedded by games/builtin. The builds are
# reproducible (Go: -trimpath, empty build id, no VCS stamp; C: no debug info,
# relative paths), so the committed .wasm files can be checked against the
# sources: games/builtin's tests rebuild with exactly these commands and fail if
# the bytes differ.
#
# Go modules need the Go toolchain go.mod selects; C modules need Debian's
# clang, lld, wasi-libc and libclang-rt-14-dev-wasm32.
#
# Usage, from anywhere: bash games/build.sh
set -euo pipefail

cd "$(dirname "$0")/.."

gomod() { # gomod OUT PKG
	GOOS=wasip1 GOARCH=wasm GOFLAGS= go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags=-buildid= \
		-o "$1" "$2"
}

# cmod OUT SRC: keep these flags in sync with games/builtin/stale_test.go.
cmod() {
	clang --target=wasm32-wasi -O2 -mexec-model=reactor -Igames/c \
		-Wl,-z,stack-size=16384 -Wl,--strip-debug -o "$1" "$2"
}

gomod games/builtin/arena.wasm ./games/arena/module
gomod games/builtin/density-go.wasm ./games/density/module
cmod games/builtin/pong-c.wasm games/pong-c/pong.c
cmod games/builtin/density-c.wasm games/density/c/density.c

for f in arena density-go pong-c density-c; do
	echo "games/builtin/$f.wasm: $(wc -c <games/builtin/$f.wasm) bytes, sha256 $(sha256sum games/builtin/$f.wasm | cut -d' ' -f1)"
done
