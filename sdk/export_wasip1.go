//go:build wasip1

package sdk

import (
	"unsafe"

	"ludus.dev/ludus/sdk/abi"
)

// This file is the module side of docs/ABI.md: every ludus_* export, forwarding
// to the registered Game. //go:wasmexport works in any package since Go 1.24, so
// a game's main package only has to import sdk and call Register.

// Error codes returned by ludus_init and ludus_load.
const (
	errCodeGame     = 1 // the game returned an error
	errCodeBadLen   = 2 // the length is negative or beyond the scratch buffer
	errCodeNoGame   = 3 // nothing was registered
	errCodeNoLoader = 4 // the game does not implement Checkpointer
)

// maxScratch bounds ludus_buffer: a request beyond it is answered with 0 rather
// than an out-of-memory trap.
const maxScratch = 1 << 30

var (
	// scratch is where the host writes config, events and checkpoints.
	scratch []byte
	// out keeps the last slice returned to the host reachable, so the garbage
	// collector cannot reuse its memory before the host has read it.
	out []byte
	// jsonBuf is reused for the JSON of ludus_meta and ludus_result.
	jsonBuf []byte
)

// errNoGame is the message of a module built without calling Register.
const errNoGame = "ludus sdk: no game registered; call sdk.Register from an init function of package main"

// game returns the registered game, trapping with a readable message when the
// module was built without calling Register: the Go runtime writes a panic's
// message ("panic: ...") to stderr before it traps, and the host reports it
// (docs/ABI.md, "Errors and output").
func game() Game {
	if registered == nil {
		panic(errNoGame)
	}
	return registered
}

// packOut keeps b alive and returns it as a packed slice (0 for empty).
func packOut(b []byte) int64 {
	out = b
	if len(b) == 0 {
		return 0
	}
	return int64(abi.Pack(uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))))
}

// scratchSlice returns the first n bytes of the scratch buffer, or false when n
// does not fit in it.
func scratchSlice(n int32) ([]byte, bool) {
	if n < 0 || int(n) > cap(scratch) {
		return nil, false
	}
	return scratch[:n], true
}

// logError writes "error: TEXT" to stderr, the line the host takes as the
// module's message when the export returns an error code (docs/ABI.md,
// "Errors and output"); the match's guest log keeps it too. It uses the
// println builtin because package os would add WASI imports.
func logError(err error) { println(errorLine(err.Error())) }

//go:wasmexport ludus_abi_version
func ludusABIVersion() int32 { return abi.Version }

//go:wasmexport ludus_meta
func ludusMeta() int64 {
	jsonBuf = AppendMetaJSON(jsonBuf[:0], game().Meta())
	return packOut(jsonBuf)
}

//go:wasmexport ludus_buffer
func ludusBuffer(size int32) int32 {
	if size < 0 || size > maxScratch {
		return 0
	}
	if cap(scratch) < int(size) || cap(scratch) == 0 {
		n := max(int(size), 2*cap(scratch), 4096)
		scratch = make([]byte, n)
	}
	scratch = scratch[:cap(scratch)]
	return int32(uintptr(unsafe.Pointer(&scratch[0])))
}

//go:wasmexport ludus_init
func ludusInit(seed int64, configLen int32) int32 {
	if registered == nil {
		println(errorLine(errNoGame))
		return errCodeNoGame
	}
	cfg, ok := scratchSlice(configLen)
	if !ok {
		println(errorLine("ludus sdk: the config length is beyond the scratch buffer"))
		return errCodeBadLen
	}
	if err := registered.Init(uint64(seed), cfg); err != nil {
		logError(err)
		return errCodeGame
	}
	return 0
}

//go:wasmexport ludus_step
func ludusStep(eventsLen int32) int32 {
	g := game()
	events, ok := scratchSlice(eventsLen)
	if !ok {
		events = nil // a bad length carries no events; the tick still runs
	}
	if StepEvents(g, events) {
		return abi.StepEnded
	}
	return abi.StepRunning
}

//go:wasmexport ludus_view
func ludusView(slot int32) int64 { return packOut(game().View(int(slot))) }

// ludus_render draws the snapshot in the scratch buffer. A bad length renders
// an empty (hence malformed) snapshot; a game that is not a Renderer returns an
// empty slice (hosts call ludus_render only for modules declaring a
// snapshot_format).
//
//go:wasmexport ludus_render
func ludusRender(length int32) int64 {
	r, ok := game().(Renderer)
	if !ok {
		return packOut(nil)
	}
	snapshot, ok := scratchSlice(length)
	if !ok {
		snapshot = nil
	}
	return packOut(r.Render(snapshot))
}

//go:wasmexport ludus_state_hash
func ludusStateHash() int64 { return int64(game().StateHash()) }

//go:wasmexport ludus_result
func ludusResult() int64 {
	jsonBuf = AppendResultJSON(jsonBuf[:0], game().Result())
	return packOut(jsonBuf)
}

//go:wasmexport ludus_save
func ludusSave() int64 {
	cp, ok := game().(Checkpointer)
	if !ok {
		return packOut(nil) // empty: "no checkpoint support"
	}
	return packOut(cp.Save())
}

//go:wasmexport ludus_load
func ludusLoad(length int32) int32 {
	cp, ok := game().(Checkpointer)
	if !ok {
		return errCodeNoLoader
	}
	b, ok := scratchSlice(length)
	if !ok {
		return errCodeBadLen
	}
	if err := cp.Load(b); err != nil {
		logError(err)
		return errCodeGame
	}
	return 0
}
