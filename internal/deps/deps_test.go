// Package deps holds repository-wide tests of which package may import what.
package deps

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// etcdOwners are the directories whose non-test code may import etcd's
// packages: clusterstate owns Ludus's state in etcd, ops/etcdserver runs
// embedded etcd, and cmd/ludus builds clients for the roles. Everything else
// goes through clusterstate, so the claim protocol, its fencing and the key
// layout stay in one place.
var etcdOwners = map[string]bool{
	"clusterstate":   true,
	"ops/etcdserver": true,
	"cmd/ludus":      true,
}

// TestOnlyClusterstateImportsEtcd fails when a package other than etcdOwners
// imports go.etcd.io/etcd/... (the client, its concurrency package, the API
// types) in non-test code. Tests may poke etcd directly.
func TestOnlyClusterstateImportsEtcd(t *testing.T) {
	root := "../.."
	importers := map[string][]string{} // dir -> etcd imports
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if name == "node_modules" || name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if strings.HasPrefix(p, "go.etcd.io/etcd/") {
				importers[rel] = append(importers[rel], filepath.Base(path)+": "+p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(importers["clusterstate"]) == 0 || len(importers["ops/etcdserver"]) == 0 {
		t.Fatalf("clusterstate and ops/etcdserver import no etcd package; is the walk rooted right? found %v", importers)
	}
	dirs := make([]string, 0, len(importers))
	for dir := range importers {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if !etcdOwners[dir] {
			t.Errorf("package %s imports etcd (%s); go through ludus.dev/ludus/clusterstate instead",
				dir, strings.Join(importers[dir], ", "))
		}
	}
}
