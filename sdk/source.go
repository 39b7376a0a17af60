//go:build !wasip1

package sdk

import "embed"

// Source holds the Go source of this SDK — packages sdk, sdk/abi and
// sdk/sdktest, tests included — so that `ludus new` can write a copy of it into
// a new game project, which then builds offline, without a checkout of Ludus
// (the SDK is not published as a module). It is absent from wasm builds, so
// game modules do not carry it.
//
//go:embed *.go abi/*.go sdktest/*.go
var Source embed.FS
