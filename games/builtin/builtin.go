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

// Pong is a two-player Pong written in C (games/pong-c), the sample proving the
// ABI is not Go-only. Its views are "pong-state-v1" snapshots (see pong.c).
//
//go:embed pong-c.wasm
var Pong []byte

// DensityC and DensityGo are the minimal module of `ludus bench density` (64
// entities bouncing in a box at 30 Hz), in C (games/density/c) and with the Go
// SDK (games/density). They compute identical states.
//
//go:embed density-c.wasm
var DensityC []byte

//go:embed density-go.wasm
var DensityGo []byte
