//go:build wasip1

// Command module is the arena game as a Ludus wasm module. Build it with
// bash games/build.sh (from the repo root); the SDK provides every ludus_*
// export, this file only registers the game.
package main

import (
	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/sdk"
)

func init() { sdk.Register(arena.New()) }

func main() {}
