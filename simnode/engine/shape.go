package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"ludus.dev/ludus/sdk/abi"
)

// wasiModule is the only module a game may import from.
const wasiModule = "wasi_snapshot_preview1"

// allowedImports are the WASI functions the host implements deterministically
// (docs/ABI.md). Everything else — sockets, files, other host modules — is refused
// at upload, so a module that would need it never reaches a sim node.
var allowedImports = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true, "random_get": true,
	"fd_write": true, "fd_close": true, "fd_fdstat_get": true, "fd_prestat_get": true,
	"fd_prestat_dir_name": true, "fd_seek": true, "proc_exit": true, "sched_yield": true,
	"poll_oneoff": true, "fd_fdstat_set_flags": true, "fd_read": true,
}

type sig struct {
	params, results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

var requiredExports = map[string]sig{
	abi.ExportABIVersion: {nil, []api.ValueType{i32}},
	abi.ExportMeta:       {nil, []api.ValueType{i64}},
	abi.ExportBuffer:     {[]api.ValueType{i32}, []api.ValueType{i32}},
	abi.ExportInit:       {[]api.ValueType{i64, i32}, []api.ValueType{i32}},
	abi.ExportStep:       {[]api.ValueType{i32}, []api.ValueType{i32}},
	abi.ExportView:       {[]api.ValueType{i32}, []api.ValueType{i64}},
	abi.ExportStateHash:  {nil, []api.ValueType{i64}},
	abi.ExportResult:     {nil, []api.ValueType{i64}},
}

var optionalExports = map[string]sig{
	abi.ExportSave: {nil, []api.ValueType{i64}},
	abi.ExportLoad: {[]api.ValueType{i32}, []api.ValueType{i32}},
}

// renderExport is the signature of ludus_render, required of modules that
// declare a snapshot_format (checked with the metadata, in Compile) and
// optional otherwise: every module built with the Go SDK exports it.
var renderExport = sig{[]api.ValueType{i32}, []api.ValueType{i64}}

// shape is what checkShape learns about a module's exports.
type shape struct {
	hasCheckpoint bool // ludus_save and ludus_load
	hasRender     bool // ludus_render, with the right signature
}

// checkShape verifies imports and exports of a compiled module against ABI v1.
// Its errors name every problem found. When instrumented, the import and
// exports the rewriter added are allowed (the rewriter refuses modules that
// bring their own). An export named ludus_render must have its signature even
// when the module declares no snapshot format: the name is the ABI's.
func checkShape(c wazero.CompiledModule, instrumented bool) (shape, error) {
	var problems []string
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if instrumented && mod == hostModule && name == hostRefill {
			continue
		}
		if mod != wasiModule || !allowedImports[name] {
			problems = append(problems, fmt.Sprintf("imports %s.%s, which the Ludus host does not provide (only deterministic WASI functions are allowed: see docs/ABI.md)", mod, name))
		}
	}
	if len(c.ImportedMemories()) > 0 {
		problems = append(problems, "imports a memory; a game must define and export its own")
	}
	if _, ok := c.ExportedMemories()["memory"]; !ok {
		problems = append(problems, `does not export its linear memory as "memory"`)
	}
	exports := c.ExportedFunctions()
	for _, name := range sortedKeys(requiredExports) {
		want := requiredExports[name]
		fn, ok := exports[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("is missing the required export %s%s", name, want))
			continue
		}
		if !sigEqual(fn, want) {
			problems = append(problems, fmt.Sprintf("exports %s with signature %s, want %s", name, sigOf(fn), want))
		}
	}
	present := 0
	for _, name := range sortedKeys(optionalExports) {
		want := optionalExports[name]
		fn, ok := exports[name]
		if !ok {
			continue
		}
		present++
		if !sigEqual(fn, want) {
			problems = append(problems, fmt.Sprintf("exports %s with signature %s, want %s", name, sigOf(fn), want))
		}
	}
	if present == 1 {
		problems = append(problems, "exports only one of ludus_save and ludus_load; checkpoints need both")
	}
	var sh shape
	if fn, ok := exports[abi.ExportRender]; ok {
		if sigEqual(fn, renderExport) {
			sh.hasRender = true
		} else {
			problems = append(problems, fmt.Sprintf("exports %s with signature %s, want %s", abi.ExportRender, sigOf(fn), renderExport))
		}
	}
	if _, ok := exports["_start"]; ok {
		problems = append(problems, "exports _start: build it as a reactor (Go: -buildmode=c-shared; C: -mexec-model=reactor)")
	}
	if len(problems) > 0 {
		return shape{}, fmt.Errorf("%w: the module %s", ErrInvalidModule, strings.Join(problems, "; "))
	}
	sh.hasCheckpoint = present == 2
	return sh, nil
}

func sortedKeys(m map[string]sig) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sigEqual(fn api.FunctionDefinition, want sig) bool {
	return slices.Equal(fn.ParamTypes(), want.params) && slices.Equal(fn.ResultTypes(), want.results)
}

func sigOf(fn api.FunctionDefinition) string {
	return sig{fn.ParamTypes(), fn.ResultTypes()}.String()
}

func (s sig) String() string {
	name := func(ts []api.ValueType) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = api.ValueTypeName(t)
		}
		return strings.Join(parts, ", ")
	}
	out := "(" + name(s.params) + ")"
	if len(s.results) > 0 {
		out += " -> " + name(s.results)
	}
	return out
}
