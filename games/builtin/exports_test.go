package builtin

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"ludus.dev/ludus/sdk/abi"
)

// The exports of docs/ABI.md with their wasm signatures.
var wantExports = map[string]string{
	abi.ExportABIVersion: "()->(i32)",
	abi.ExportMeta:       "()->(i64)",
	abi.ExportBuffer:     "(i32)->(i32)",
	abi.ExportInit:       "(i64,i32)->(i32)",
	abi.ExportStep:       "(i32)->(i32)",
	abi.ExportView:       "(i32)->(i64)",
	abi.ExportStateHash:  "()->(i64)",
	abi.ExportResult:     "()->(i64)",
	abi.ExportSave:       "()->(i64)",
	abi.ExportLoad:       "(i32)->(i32)",
	abi.ExportRender:     "(i32)->(i64)",
	"_initialize":        "()->()",
}

// allowedImports reads the wasi_snapshot_preview1 functions docs/ABI.md allows:
// the backquoted names of the paragraph of the "Imports" section that starts
// with `args_get`.
func allowedImports(t *testing.T) []string {
	doc, err := os.ReadFile("../../docs/ABI.md")
	if err != nil {
		t.Fatal(err)
	}
	section := bytes.Index(doc, []byte("\n## Imports"))
	start := bytes.Index(doc[max(section, 0):], []byte("\n`args_get`"))
	if section < 0 || start < 0 {
		t.Fatal("docs/ABI.md: cannot find the list of allowed imports")
	}
	para := doc[section+start+1:]
	if end := bytes.Index(para, []byte("\n\n")); end >= 0 {
		para = para[:end]
	}
	var names []string
	for _, m := range regexp.MustCompile("`([a-z_0-9]+)`").FindAllSubmatch(para, -1) {
		names = append(names, string(m[1]))
	}
	if len(names) < 10 {
		t.Fatalf("docs/ABI.md: only %d allowed imports found: %q", len(names), names)
	}
	return names
}

func signature(d api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + join(s) + ")"
	}
	return names(d.ParamTypes()) + "->" + names(d.ResultTypes())
}

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

// TestArenaInterface checks the module's exports and imports against the ABI.
func TestArenaInterface(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, Arena)
	if err != nil {
		t.Fatal(err)
	}
	exports := cm.ExportedFunctions()
	for name, def := range exports {
		want, ok := wantExports[name]
		switch {
		case !ok:
			t.Errorf("unexpected export %s%s", name, signature(def))
		case signature(def) != want:
			t.Errorf("export %s has signature %s, want %s", name, signature(def), want)
		}
	}
	for name := range wantExports {
		if _, ok := exports[name]; !ok {
			t.Errorf("missing export %s", name)
		}
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		t.Error("memory is not exported")
	}
	allowed := allowedImports(t)
	var imports []string
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		if mod != wasi_snapshot_preview1.ModuleName || !slices.Contains(allowed, name) {
			t.Errorf("import %s.%s is not allowed by docs/ABI.md", mod, name)
		}
		if !slices.Contains(imports, name) {
			imports = append(imports, name)
		}
	}
	slices.Sort(imports)
	t.Logf("imports: %v", imports)
}
