// Package builtin embeds the game modules that ship with Ludus, prebuilt, so the
// host can run them without a Go toolchain. The .wasm files are built by
// games/build.sh; the package's tests rebuild them and fail when a committed
// module no longer matches its sources, and check that each module computes
// exactly what the native Go package does.
package builtin

import _ "embed"

// Arena is the arena deathmatch (games/arena) as an ABI v1 module.
//
//go:embed arena.wasm
var Arena []byte
