package web

import (
	"bytes"
	"os"
	"testing"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/sdk"
)

// TestArenaFallbackMeta: the page falls back to src/arena-meta.json when a server
// sends no Status.module_meta; it must be exactly what the arena module declares.
func TestArenaFallbackMeta(t *testing.T) {
	got, err := os.ReadFile("src/arena-meta.json")
	if err != nil {
		t.Fatal(err)
	}
	want := sdk.AppendMetaJSON(nil, arena.New().Meta())
	if !bytes.Equal(bytes.TrimSpace(got), want) {
		t.Fatalf("web/src/arena-meta.json differs from the arena's ludus_meta; replace it with:\n%s", want)
	}
}
