package engine

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// DefaultCacheMaxBytes is what PruneCache keeps of the compilation cache on
// disk by default: wazero writes every module it compiles there (about 10 MB
// for the arena) and never deletes one, so a node that plays every build its
// tenants upload, or a backend that checks every upload, filled its disk
// (the Kubernetes manifests give the cache 1 GiB, and a pod past it is
// evicted).
const DefaultCacheMaxBytes = 512 << 20

// PruneCache deletes the oldest files of the engine's compilation cache
// (Config.CacheDir) until the rest take at most maxBytes (0:
// DefaultCacheMaxBytes). A deleted module is compiled again the next time
// it is needed. It returns how many files it deleted.
func (e *Engine) PruneCache(maxBytes int64) (int, error) {
	if e.cfg.CacheDir == "" {
		return 0, nil
	}
	if maxBytes <= 0 {
		maxBytes = DefaultCacheMaxBytes
	}
	return pruneDir(e.cfg.CacheDir, maxBytes)
}

// pruneDir deletes the oldest regular files under dir (by modification
// time) until the rest take at most maxBytes.
func pruneDir(dir string, maxBytes int64) (int, error) {
	type file struct {
		path string
		size int64
		mod  time.Time
	}
	var files []file
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file deleted meanwhile, an unreadable directory: skip it
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, file{path, info.Size(), info.ModTime()})
		return nil
	})
	if err != nil {
		return 0, err
	}
	slices.SortFunc(files, func(a, b file) int { return b.mod.Compare(a.mod) }) // newest first
	var kept int64
	removed := 0
	for _, f := range files {
		if kept+f.size <= maxBytes {
			kept += f.size
			continue
		}
		if os.Remove(f.path) == nil {
			removed++
		}
	}
	return removed, nil
}
