package main

import (
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"ludus.dev/ludus/sdk"
)

// scaffold holds the templates of `ludus new`: scaffold/go and scaffold/c are
// project trees whose files end in .tmpl (so that Go does not compile them)
// and hold {{NAME}}, {{PKG}} and {{GOVERSION}}, replaced as plain text.
//
//go:embed all:scaffold
var scaffold embed.FS

const newUsage = `ludus new NAME [--lang go|c] [--dir DIR]

Writes a working game module project named NAME into DIR (default ./NAME): a
small 1-4 player grid game, a determinism test (Go), a build script producing
NAME.wasm and a README with the build, test, check, upload and play commands.
NAME: lower-case letters and digits, words joined by '-', at most 32 bytes.
A Go project includes a copy of the Ludus Go SDK (ludus-sdk/, used through a
replace directive), so it builds and tests offline.
`

// validName is what NAME may be: a module name, a Go import path, a directory
// name and a Ludus module name (abi.Meta.Name) at once.
var validName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// checkName explains what is wrong with a project name.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("a project name is required: ludus new NAME")
	case strings.ContainsAny(name, `/\`) || name == "." || name == "..":
		return fmt.Errorf("the name %q is a path; give a plain name and choose the directory with --dir DIR", name)
	case len(name) > 32:
		return fmt.Errorf("the name %q is longer than 32 bytes", name)
	case !validName.MatchString(name):
		return fmt.Errorf("the name %q is not valid: use lower-case letters and digits, starting with a letter, words joined by '-' (e.g. gem-race)", name)
	}
	return nil
}

func runNew(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("new", flag.ContinueOnError)
	fs.SetOutput(out)
	lang := fs.String("lang", "go", "language of the project: go or c")
	dir := fs.String("dir", "", "directory to write (default ./NAME); it must not exist or be empty")
	fs.Usage = func() { fmt.Fprint(fs.Output(), newUsage) }
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("one project name expected, got %q", pos)
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	if err := checkName(name); err != nil {
		return err
	}
	if *lang != "go" && *lang != "c" {
		return fmt.Errorf("--lang %q: want go or c", *lang)
	}
	if *dir == "" {
		*dir = name
	}
	files, err := projectFiles(name, *lang)
	if err != nil {
		return err
	}
	if err := writeProject(*dir, files); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s project %s in %s (%d files)\n", *lang, name, *dir, len(files))
	if *lang == "go" {
		fmt.Fprintf(out, "next: cd %s && go test ./... && ./build.sh && ludus ctl module check %s.wasm\n", *dir, name)
	} else {
		fmt.Fprintf(out, "next: cd %s && ./build.sh && ludus ctl module check %s.wasm  (build.sh needs clang for wasm32-wasi: see README.md)\n", *dir, name)
	}
	return nil
}

// parseInterspersed parses flags given before, between or after positional
// arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// projectFile is one file of a new project.
type projectFile struct {
	path string // slash-separated, relative to the project
	data []byte
	exec bool
}

// projectFiles renders the templates of lang for name and, for Go, adds the
// SDK's source.
func projectFiles(name, lang string) ([]projectFile, error) {
	goVersion := "1.26"
	if v, ok := strings.CutPrefix(runtime.Version(), "go"); ok {
		if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
			goVersion = parts[0] + "." + strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
		}
	}
	subst := strings.NewReplacer("{{NAME}}", name, "{{PKG}}", strings.ReplaceAll(name, "-", ""), "{{GOVERSION}}", goVersion)
	var files []projectFile
	root := "scaffold/" + lang
	err := fs.WalkDir(scaffold, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := scaffold.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root+"/")
		if t, ok := strings.CutSuffix(rel, ".tmpl"); ok {
			rel, b = t, []byte(subst.Replace(string(b)))
		}
		if rel == "gitignore" {
			rel = ".gitignore"
		}
		files = append(files, projectFile{path: rel, data: b, exec: strings.HasSuffix(rel, ".sh")})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if lang == "go" {
		mod, err := scaffold.ReadFile("scaffold/sdk-go.mod.tmpl")
		if err != nil {
			return nil, err
		}
		files = append(files, projectFile{path: "ludus-sdk/go.mod", data: []byte(subst.Replace(string(mod)))})
		err = fs.WalkDir(sdk.Source, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err // the SDK's tests use games of the Ludus tree
			}
			b, err := sdk.Source.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, projectFile{path: path.Join("ludus-sdk/sdk", p), data: b})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// writeProject writes files into dir, which must not exist or be empty.
func writeProject(dir string, files []projectFile) error {
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("%s exists and is not empty; choose another --dir or name", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if f.exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, f.data, mode); err != nil {
			return err
		}
	}
	return nil
}
