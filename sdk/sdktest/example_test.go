package sdktest_test

import (
	"fmt"

	"ludus.dev/ludus/games/density"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/sdktest"
)

// In a game's own tests, call sdktest.Run(t, newGame, options); Check returns
// the result instead of failing a test.
func ExampleCheck() {
	rep, err := sdktest.Check(sdktest.Game(func() sdk.Game { return density.New() }), sdktest.Options{Seed: 1, Ticks: 100})
	if err != nil {
		fmt.Println(err) // the first differing tick, the run and the likely causes
		return
	}
	fmt.Println(rep.Runs, "runs of", rep.Ticks, "ticks agree; checkpoints:", rep.Checkpoints)
	// Output: 6 runs of 100 ticks agree; checkpoints: 0
}
