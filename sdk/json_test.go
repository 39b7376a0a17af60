package sdk

import (
	"encoding/json"
	"reflect"
	"testing"

	"ludus.dev/ludus/sdk/abi"
)

var weirdStrings = []string{
	"", "ada", `quo"te\back`, "tab\tnew\nline\rcr\bbs\fff", "\x00\x01\x1f\x7f", "<b>&amp;</b>",
	"héllo wörld ✓ 🎮", "\xff\xfe invalid \xc3", "\u2028\u2029", "a\u00a0b",
}

func TestJSONMatchesEncodingJSON(t *testing.T) {
	// The hand-written encoders must cover every field of the abi structs.
	for typ, n := range map[reflect.Type]int{
		reflect.TypeFor[abi.Meta]():         14,
		reflect.TypeFor[abi.Control]():      3,
		reflect.TypeFor[abi.Result]():       4,
		reflect.TypeFor[abi.PlayerResult](): 5,
	} {
		if typ.NumField() != n {
			t.Errorf("%v has %d fields, sdk/json.go encodes %d: update it", typ, typ.NumField(), n)
		}
	}
	metas := []abi.Meta{{}, {Name: "arena", TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "indexed8", ViewWidth: 320, ViewHeight: 200},
		{Name: "arena", TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "indexed8", ViewWidth: 320, ViewHeight: 200,
			InputKind: abi.InputState, SnapshotFormat: "arena-snap-v1"},
		{Name: "e", InputKind: abi.InputEvent}}
	metas = append(metas, abi.Meta{Name: "p", Title: "Pong", Bots: true, Controls: []abi.Control{}, MaxDurationS: 600},
		abi.Meta{Name: "p", Controls: []abi.Control{{}, {Keys: []string{}, Label: "x", Bit: 31}, {Keys: []string{"ArrowUp", "KeyW"}, Label: "up", Bit: -3}}})
	for _, s := range weirdStrings {
		metas = append(metas, abi.Meta{Name: s, TickRate: -1, ViewFormat: s, ViewHeight: 7, InputKind: s, SnapshotFormat: s,
			Title: s, Hint: s, Controls: []abi.Control{{Keys: []string{s, s}, Label: s, Bit: 2}}})
	}
	for _, m := range metas {
		want, _ := json.Marshal(m)
		if got := AppendMetaJSON(nil, m); string(got) != string(want) {
			t.Errorf("meta:\n got %s\nwant %s", got, want)
		}
	}
	results := []abi.Result{{}, {Players: []abi.PlayerResult{}}, {Ended: true, Ticks: 1 << 40, Winner: -1}}
	r := abi.Result{Ended: true, Ticks: 4200, Winner: 3}
	for i, s := range weirdStrings {
		r.Players = append(r.Players, abi.PlayerResult{Slot: i, Name: s, Score: int64(i - 3), Kills: int64(i % 3), Deaths: int64(i % 2)})
	}
	results = append(results, r)
	for _, r := range results {
		want, _ := json.Marshal(r)
		if got := AppendResultJSON(nil, r); string(got) != string(want) {
			t.Errorf("result:\n got %s\nwant %s", got, want)
		}
	}
}
