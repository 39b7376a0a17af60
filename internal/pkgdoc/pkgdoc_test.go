// Package pkgdoc holds a repository-wide test: every Go package of Ludus has a
// package doc comment saying what it is for.
package pkgdoc

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryPackageHasADoc(t *testing.T) {
	root := "../.."
	docs := map[string]bool{} // dir -> has doc
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
		dir := filepath.Dir(path)
		if strings.Contains(dir, string(os.PathSeparator)+"gen") {
			return nil // generated code
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		docs[dir] = docs[dir] || (f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d packages; is the walk rooted right?", len(docs))
	}
	for dir, ok := range docs {
		if !ok {
			t.Errorf("package in %s has no package doc comment", dir)
		}
	}
}
