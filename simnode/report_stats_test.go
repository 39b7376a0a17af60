package simnode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/internal/wasmtest"
)

func TestDecodeResultPassesStatsThrough(t *testing.T) {
	raw := `{"ended":true,"ticks":4200,"winner":3,"players":[
		{"slot":0,"name":"ada","score":12,"kills":12,"deaths":4,"xp":150,"coins":7,"items":{"sword":1},"title":"champ","ratio":1.5},
		{"slot":3,"name":"bob","score":9,"kills":9,"deaths":2,"BadName":1,"huge":10000000000000},
		{"name":"no slot","score":99}]}`
	r, err := decodeResult([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.players) != 2 || r.winner != 3 {
		t.Fatalf("players %+v winner %d", r.players, r.winner)
	}
	ada, bob := r.players[0], r.players[1]
	want := map[string]int64{"score": 12, "kills": 12, "deaths": 4, "xp": 150, "coins": 7}
	if !maps.Equal(ada.stats, want) || ada.score != 12 || ada.slot != 0 {
		t.Errorf("ada = %+v, want stats %v", ada, want)
	}
	if !maps.Equal(bob.stats, map[string]int64{"score": 9, "kills": 9, "deaths": 2}) {
		t.Errorf("bob = %+v", bob)
	}
	// Ignored: ada's items (object), title (string), ratio (fraction); bob's
	// BadName (name) and huge (range); the slotless player's 2 fields.
	if r.ignored != 7 {
		t.Errorf("ignored = %d, want 7", r.ignored)
	}
	// The winner (slot 3) is first although ada scored more.
	if bob.place != 1 || ada.place != 2 {
		t.Errorf("places: bob %d, ada %d; want 1, 2", bob.place, ada.place)
	}
}

func TestDecodeResultPlaces(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []int // places by player
	}{
		// No winner: by score, ties share (1, 2, 2, 4).
		{`{"winner":-1,"players":[{"slot":0,"score":5},{"slot":1,"score":3},{"slot":2,"score":3},{"slot":3,"score":1}]}`, []int{1, 2, 2, 4}},
		// Teams: the winner's team first whatever its score; teammates share.
		{`{"winner":1,"players":[{"slot":0,"score":9,"team":1},{"slot":1,"score":1,"team":2},{"slot":2,"score":0,"team":2},{"slot":3,"score":0,"team":1}]}`, []int{2, 1, 1, 2}},
		// One side: nobody placed.
		{`{"winner":0,"players":[{"slot":0,"score":5}]}`, []int{0}},
		// A winner that is not a player, as a string: by score.
		{`{"winner":"x","players":[{"slot":0,"score":1},{"slot":1,"score":2}]}`, []int{2, 1}},
	} {
		r, err := decodeResult([]byte(tc.raw))
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		var got []int
		for _, p := range r.players {
			got = append(got, p.place)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: places %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestDecodeResultBounds(t *testing.T) {
	// At most 64 stats per player; the rest are counted, not passed.
	var b strings.Builder
	b.WriteString(`{"players":[{"slot":0`)
	for i := range 100 {
		fmt.Fprintf(&b, `,"s%03d":%d`, i, i)
	}
	b.WriteString(`}]}`)
	r, err := decodeResult([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.players[0].stats) != maxResultStats || r.ignored != 100-maxResultStats {
		t.Errorf("%d stats, %d ignored", len(r.players[0].stats), r.ignored)
	}
	for _, bad := range []string{
		`not json`,
		`{"players":{"slot":0}}`,
		`{"players":[` + strings.Repeat(`{"slot":0},`, maxResultPlayers) + `{"slot":1}]}`,
		`{"players":[{"slot":0,"pad":"` + strings.Repeat("x", maxResultBytes) + `"}]}`,
	} {
		if _, err := decodeResult([]byte(bad)); err == nil {
			t.Errorf("decodeResult(%.40q...) accepted", bad)
		}
	}
}

func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"ended":true,"winner":1,"players":[{"slot":0,"score":3,"kills":3},{"slot":1,"score":4,"team":2}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := decodeResult(raw)
		if err != nil {
			return
		}
		for _, p := range r.players {
			if len(p.stats) > maxResultStats || p.slot < 0 || p.place < 0 || p.place > len(r.players) {
				t.Fatalf("out of bounds: %+v", p)
			}
			for k, v := range p.stats {
				if !isStatName(k) || v > maxStatValue || v < -maxStatValue {
					t.Fatalf("bad stat %q = %d", k, v)
				}
			}
		}
	})
}

// A result with fields that are not passed on is said in the node's log at
// info level the first time (a studio reads that log), at debug level after:
// the result is read again every 30 s.
func TestIgnoredResultFieldsLoggedOnce(t *testing.T) {
	ctx := context.Background()
	result := `{"players":[{"slot":0,"score":7,"title":"ace","ratio":0.5}]}`
	funcs := wasmtest.ABIFuncs(wasmtest.HostileMetaBody())
	wasmtest.SetBody(funcs, "ludus_result", wasmtest.I64Const(int64(wasmtest.DataAddr+len(wasmtest.HostileMeta))<<32|int64(len(result))))
	mod, err := testEng.Compile(ctx, wasmtest.Module{Funcs: funcs, MemoryPages: 1, ExportMemory: true, Data: []byte(wasmtest.HostileMeta + result)}.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	inst, err := mod.Instantiate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	g := &game{inst: inst, spec: clusterstate.GameSpec{TickRate: 30}, log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo})),
		slots: []*slot{{account: "a1"}, {}}}
	for range 3 {
		players, err := g.resultPlayers(ctx)
		if err != nil || len(players) != 1 || players[0].Stats["score"] != 7 || len(players[0].Stats) != 1 {
			t.Fatalf("result %v, %v; want a1 with score 7 alone", players, err)
		}
	}
	if n := strings.Count(logged.String(), "result fields not passed on"); n != 1 || !strings.Contains(logged.String(), "level=INFO") ||
		!strings.Contains(logged.String(), "fields=2") {
		t.Fatalf("%d info lines about the fields left out, want one saying 2:\n%s", n, logged.String())
	}
}
