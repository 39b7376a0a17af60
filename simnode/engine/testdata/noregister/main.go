//go:build wasip1

// Command noregister is a game module for the engine's tests: it imports the
// SDK but forgets to call sdk.Register, the mistake whose message (the SDK's,
// naming the fix) must reach whoever runs it. Built by the tests.
package main

import _ "ludus.dev/ludus/sdk"

func main() {}
