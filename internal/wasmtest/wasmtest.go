// Package wasmtest builds tiny WebAssembly binaries for tests, without a
// toolchain: modules that are well-formed but wrong in one chosen way (a
// missing export, a forbidden import, a trap, a runaway loop). It also holds
// the parts of a hostile Ludus ABI v1 game module that the tests of the sim
// node and of its engine share. Only tests import it.
package wasmtest

// Value types, as they appear in function types, locals and block types.
const (
	I32 = 0x7f
	I64 = 0x7e
)

// DataAddr is where Module.Data lands in linear memory.
const DataAddr = 1024

// Func is a function of a Module, defined by the module (not imported).
type Func struct {
	// Export names the function's export; "" leaves it unexported.
	Export string
	// Params and Results are value types (I32, I64, ...).
	Params, Results []byte
	// Body is the function's instructions, without the final end (0x0b).
	Body []byte
	// NLocals locals of type LocalType follow the parameters.
	NLocals   uint32
	LocalType byte
}

// Import is a function the module imports; it gets the function index of its
// position, before the module's own functions.
type Import struct {
	Module, Name    string
	Params, Results []byte
}

// Module is a WebAssembly module: imported functions, then its own functions
// (their indices start after the imports'), an optional memory and one active
// data segment.
type Module struct {
	Imports []Import
	Funcs   []Func
	// MemoryPages is the memory's minimum size in 64 KiB pages; 0 means no
	// memory.
	MemoryPages int
	// ExportMemory exports the memory as "memory".
	ExportMemory bool
	// Data is written at DataAddr by an active data segment.
	Data []byte
}

// Bytes returns the binary encoding of the module.
func (m Module) Bytes() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	var types, imps, funcs, exports, codes [][]byte
	for _, im := range m.Imports {
		types = append(types, FuncType(im.Params, im.Results))
		imps = append(imps, Cat(Str(im.Module), Str(im.Name), []byte{0x00}, LEB(uint32(len(types)-1))))
	}
	for i, f := range m.Funcs {
		types = append(types, FuncType(f.Params, f.Results))
		funcs = append(funcs, LEB(uint32(len(types)-1)))
		if f.Export != "" {
			exports = append(exports, Cat(Str(f.Export), []byte{0x00}, LEB(uint32(len(m.Imports)+i))))
		}
		body := []byte{0x00} // no locals
		if f.NLocals > 0 {
			body = append(append([]byte{0x01}, LEB(f.NLocals)...), f.LocalType)
		}
		body = append(body, f.Body...)
		body = append(body, 0x0b)
		codes = append(codes, append(LEB(uint32(len(body))), body...))
	}
	if m.ExportMemory {
		exports = append(exports, append(Str("memory"), 0x02, 0x00))
	}
	out = append(out, Section(1, Vec(types...))...)
	if len(imps) > 0 {
		out = append(out, Section(2, Vec(imps...))...)
	}
	out = append(out, Section(3, Vec(funcs...))...)
	if m.MemoryPages > 0 {
		out = append(out, Section(5, Vec(append([]byte{0x00}, LEB(uint32(m.MemoryPages))...)))...)
	}
	out = append(out, Section(7, Vec(exports...))...)
	out = append(out, Section(10, Vec(codes...))...)
	if len(m.Data) > 0 {
		seg := Cat([]byte{0x00}, I32Const(DataAddr), []byte{0x0b}, LEB(uint32(len(m.Data))), m.Data)
		out = append(out, Section(11, Vec(seg))...)
	}
	return out
}

// LEB is the unsigned LEB128 encoding of v.
func LEB(v uint32) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

// SLEB is the signed LEB128 encoding of v.
func SLEB(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// Vec is a vector: the count of items, then the items.
func Vec(items ...[]byte) []byte {
	out := LEB(uint32(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

// Str is a name: its length in bytes, then its bytes.
func Str(s string) []byte { return append(LEB(uint32(len(s))), s...) }

// Section is a section with the given id and contents.
func Section(id byte, body []byte) []byte {
	return append(append([]byte{id}, LEB(uint32(len(body)))...), body...)
}

// FuncType is a function type (params) -> (results).
func FuncType(params, results []byte) []byte {
	out := []byte{0x60}
	out = append(out, LEB(uint32(len(params)))...)
	out = append(out, params...)
	out = append(out, LEB(uint32(len(results)))...)
	return append(out, results...)
}

// I32Const is the instruction i32.const v.
func I32Const(v int32) []byte { return append([]byte{0x41}, SLEB(int64(v))...) }

// I64Const is the instruction i64.const v.
func I64Const(v int64) []byte { return append([]byte{0x42}, SLEB(v)...) }

// Cat concatenates parts into a new slice.
func Cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ABIFuncs returns the eight exports of a Ludus ABI v1 game module, in the
// ABI's order (function indices 0 to 7), with harmless bodies: version 1, a
// buffer at 4096, init, step, view and result returning 0, state hash 42.
// ludus_meta has body meta, which must leave the metadata's (address<<32 |
// length) on the stack; the module must also export a memory.
func ABIFuncs(meta []byte) []Func {
	return []Func{
		{Export: "ludus_abi_version", Results: []byte{I32}, Body: I32Const(1)},
		{Export: "ludus_meta", Results: []byte{I64}, Body: meta},
		{Export: "ludus_buffer", Params: []byte{I32}, Results: []byte{I32}, Body: I32Const(4096)},
		{Export: "ludus_init", Params: []byte{I64, I32}, Results: []byte{I32}, Body: I32Const(0)},
		{Export: "ludus_step", Params: []byte{I32}, Results: []byte{I32}, Body: I32Const(0)},
		{Export: "ludus_view", Params: []byte{I32}, Results: []byte{I64}, Body: I64Const(0)},
		{Export: "ludus_state_hash", Results: []byte{I64}, Body: I64Const(42)},
		{Export: "ludus_result", Results: []byte{I64}, Body: I64Const(0)},
	}
}

// SetBody gives the functions of funcs exported as export the body body.
func SetBody(funcs []Func, export string, body []byte) {
	for i := range funcs {
		if funcs[i].Export == export {
			funcs[i].Body = body
		}
	}
}

// HostileMeta is valid metadata (30 Hz, 2 players, raw views); Hostile places
// it at DataAddr.
const HostileMeta = `{"name":"hostile","tick_rate":30,"max_players":2,"frame_divisor":1,"view_format":"raw"}`

// HostileMetaBody is the body of a ludus_meta that returns HostileMeta at
// DataAddr.
func HostileMetaBody() []byte { return I64Const(int64(DataAddr)<<32 | int64(len(HostileMeta))) }

// Hostile returns a valid ABI v1 module (metadata HostileMeta, one page of
// memory) whose export which has body instead of its harmless default (see
// ABIFuncs); the extra functions follow the ABI's, their indices start at 8.
func Hostile(which string, body []byte, extra ...Func) []byte {
	funcs := ABIFuncs(HostileMetaBody())
	SetBody(funcs, which, body)
	funcs = append(funcs, extra...)
	return Module{Funcs: funcs, MemoryPages: 1, ExportMemory: true, Data: []byte(HostileMeta)}.Bytes()
}

// Instructions and functions that misbehave, for Hostile. Callers must not
// modify them.
var (
	// Spin is loop ... br 0 ... end: it spins forever.
	Spin = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}
	// Bomb grows memory 16 pages at a time until memory.grow fails.
	Bomb = []byte{0x03, 0x40, 0x41, 0x10, 0x40, 0x00, 0x41, 0x7f, 0x47, 0x0d, 0x00, 0x0b}
	// DeepFunc is deep(): deep(), unbounded recursion, as function 8 (the
	// first extra function of Hostile).
	DeepFunc = Func{Body: []byte{0x10, 0x08}}
)
