//go:build wasip1

// Command module is the density game as a Ludus wasm module built with the Go
// SDK (bash games/build.sh).
package main

import (
	"ludus.dev/ludus/games/density"
	"ludus.dev/ludus/sdk"
)

func init() { sdk.Register(density.New()) }

func main() {}
