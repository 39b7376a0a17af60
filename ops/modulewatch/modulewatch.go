// Package modulewatch rebuilds a game module whenever its sources change and
// uploads the result: the dev loop behind `ludus dev --watch DIR`.
//
// An upload is a new build of the same module name: games created afterwards
// resolve the name to the newest build, while running games keep the build they
// started with (their spec names it).
package modulewatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Watcher watches one project directory. Zero durations take defaults.
type Watcher struct {
	Dir    string
	Name   string        // module name the builds are uploaded as
	Every  time.Duration // how often sources are fingerprinted (default 500 ms)
	Settle time.Duration // a change must be this old before building: editors save in bursts (default 300 ms)
	// Upload stores a build and returns its build id.
	Upload func(ctx context.Context, name string, wasm []byte) (buildID string, err error)
	Log    *slog.Logger
	Now    func() time.Time // default time.Now
}

// ErrNoBuildRecipe says how to make a directory watchable.
var ErrNoBuildRecipe = errors.New("modulewatch: no build.sh, Makefile or go.mod: add a build.sh that writes a .wasm into the directory (ludus new writes one)")

// sourceFile reports whether a change to path should trigger a rebuild.
func sourceFile(path string) bool {
	base := filepath.Base(path)
	switch base {
	case "Makefile", "build.sh", "go.mod", "go.sum":
		return true
	}
	switch filepath.Ext(base) {
	case ".go", ".c", ".h", ".cc", ".cpp", ".rs", ".zig", ".json":
		return true
	}
	return false
}

// fingerprint hashes the names, sizes and modification times of the sources
// under dir; build outputs (.wasm) and hidden directories are ignored.
func fingerprint(dir string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !sourceFile(path) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %d", path, info.Size(), info.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return fmt.Sprintf("%x", sum[:8]), nil
}

// build runs the directory's recipe and returns the module it produced:
// build.sh, else a Makefile, else `go build` of a Go reactor (the package in
// DIR, or DIR/module as docs/GUIDE.md lays a project out).
func (w *Watcher) build(ctx context.Context) ([]byte, error) {
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(w.Dir, name))
		return err == nil
	}
	var cmd *exec.Cmd
	var out string
	switch {
	case has("build.sh"):
		cmd = exec.CommandContext(ctx, "sh", "build.sh")
	case has("Makefile"):
		cmd = exec.CommandContext(ctx, "make")
	case has("go.mod"):
		pkg := "."
		if goFiles, _ := filepath.Glob(filepath.Join(w.Dir, "*.go")); len(goFiles) == 0 && has("module") {
			pkg = "./module"
		}
		tmp, err := os.MkdirTemp("", "ludus-watch-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		out = filepath.Join(tmp, w.Name+".wasm")
		cmd = exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	default:
		return nil, ErrNoBuildRecipe
	}
	cmd.Dir = w.Dir
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "LUDUS_MODULE_NAME="+w.Name)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	started := w.Now().Add(-time.Second) // file systems with coarse timestamps
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s failed: %w\n%s", strings.Join(cmd.Args, " "), err, tail(output.String(), 2000))
	}
	if out == "" {
		var err error
		if out, err = newestWasm(w.Dir, started); err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
		}
	}
	return os.ReadFile(out)
}

// newestWasm finds the .wasm in dir (not below it) written at or after since.
func newestWasm(dir string, since time.Time) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	best, bestTime := "", time.Time{}
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil || info.ModTime().Before(since) {
			continue
		}
		if best == "" || info.ModTime().After(bestTime) {
			best, bestTime = m, info.ModTime()
		}
	}
	if best == "" {
		return "", fmt.Errorf("the build wrote no new .wasm file into %s", dir)
	}
	return best, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Rebuild builds and uploads once, logging the outcome; it returns the new
// build id, or "" after an error (the watch goes on: fix the source and save).
func (w *Watcher) Rebuild(ctx context.Context) string {
	w.defaults()
	start := w.Now()
	wasm, err := w.build(ctx)
	if err != nil {
		w.Log.Error("watch: build failed; fix the source and save to retry", "dir", w.Dir, "err", err)
		return ""
	}
	build, err := w.Upload(ctx, w.Name, wasm)
	if err != nil {
		w.Log.Error("watch: upload refused; fix the module and save to retry", "module", w.Name, "err", err)
		return ""
	}
	w.Log.Info("watch: module uploaded; new games use it, running games keep theirs", "module", w.Name, "build", build[:min(12, len(build))], "bytes", len(wasm), "took", w.Now().Sub(start).Round(time.Millisecond))
	return build
}

// Run builds once, then again after every settled change, until ctx ends.
// uploaded (if not nil) receives each new build id.
func (w *Watcher) Run(ctx context.Context, uploaded chan<- string) error {
	w.defaults()
	last, err := fingerprint(w.Dir)
	if err != nil {
		return fmt.Errorf("--watch %s: %w", w.Dir, err)
	}
	return w.loop(ctx, last, uploaded)
}

func (w *Watcher) defaults() {
	if w.Now == nil {
		w.Now = time.Now
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.Every <= 0 {
		w.Every = 500 * time.Millisecond
	}
	if w.Settle <= 0 {
		w.Settle = 300 * time.Millisecond
	}
}

func (w *Watcher) loop(ctx context.Context, last string, uploaded chan<- string) error {
	emit := func(build string) {
		if build != "" && uploaded != nil {
			select {
			case uploaded <- build:
			case <-ctx.Done():
			}
		}
	}
	emit(w.Rebuild(ctx))
	pending, changedAt := "", time.Time{}
	t := time.NewTicker(w.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		fp, err := fingerprint(w.Dir)
		if err != nil {
			w.Log.Warn("watch: cannot read sources", "dir", w.Dir, "err", err)
			continue
		}
		if fp != last && fp != pending {
			pending, changedAt = fp, w.Now()
			continue
		}
		if pending != "" && fp == pending && w.Now().Sub(changedAt) >= w.Settle {
			last, pending = pending, ""
			emit(w.Rebuild(ctx))
		}
	}
}

// NameFor derives a module name from a directory's base name ("" if none).
func NameFor(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	var b strings.Builder
	for _, r := range strings.ToLower(filepath.Base(abs)) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ' || r == '.':
			b.WriteRune('-')
		}
	}
	name := b.String()
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}
