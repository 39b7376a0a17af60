package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pruneDir keeps the newest files within the bound and deletes the rest.
func TestPruneCacheKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "wazero-v1-amd64-linux")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 5 { // file i is i hours old and 100 bytes
		p := filepath.Join(sub, string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, 100), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(i) * time.Hour)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	n, err := pruneDir(dir, 250)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d files (%v), want 3", n, err)
	}
	for i, want := range []bool{true, true, false, false, false} {
		_, err := os.Stat(filepath.Join(sub, string(rune('a'+i))))
		if (err == nil) != want {
			t.Errorf("file %d (%d h old): kept %v, want %v", i, i, err == nil, want)
		}
	}
	e := &Engine{}
	if n, err := e.PruneCache(1); n != 0 || err != nil {
		t.Fatalf("an engine without a cache directory pruned %d (%v)", n, err)
	}
}
