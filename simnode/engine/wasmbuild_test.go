package engine

// A tiny WebAssembly binary builder for tests: enough to make modules that are
// well-formed but wrong in one chosen way (a missing export, a forbidden import,
// a trap) without a toolchain.

type wfunc struct {
	export  string
	params  []byte // value types: 0x7f i32, 0x7e i64
	results []byte
	body    []byte // instructions, without the final 0x0b
	// locals: nlocals locals of type localType after the parameters.
	nlocals   uint32
	localType byte
}

type wimport struct {
	module, name    string
	params, results []byte
}

type wmodule struct {
	imports      []wimport
	funcs        []wfunc
	memoryPages  int // 0 = no memory
	exportMemory bool
	data         []byte // written at address 1024 by an active data segment
}

func leb(v uint32) []byte {
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

func vec(items ...[]byte) []byte {
	out := leb(uint32(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func str(s string) []byte { return append(leb(uint32(len(s))), s...) }

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, leb(uint32(len(body)))...), body...)
}

func functype(params, results []byte) []byte {
	out := []byte{0x60}
	out = append(out, leb(uint32(len(params)))...)
	out = append(out, params...)
	out = append(out, leb(uint32(len(results)))...)
	return append(out, results...)
}

func (m wmodule) bytes() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	var types, imps, funcs, exports, codes [][]byte
	for _, im := range m.imports {
		types = append(types, functype(im.params, im.results))
		imps = append(imps, append(append(str(im.module), str(im.name)...), 0x00, byte(len(types)-1)))
	}
	for i, f := range m.funcs {
		types = append(types, functype(f.params, f.results))
		funcs = append(funcs, leb(uint32(len(types)-1)))
		if f.export != "" {
			exports = append(exports, append(str(f.export), 0x00, byte(len(m.imports)+i)))
		}
		body := []byte{0x00} // no locals
		if f.nlocals > 0 {
			body = append(append([]byte{0x01}, leb(f.nlocals)...), f.localType)
		}
		body = append(body, f.body...)
		body = append(body, 0x0b)
		codes = append(codes, append(leb(uint32(len(body))), body...))
	}
	if m.exportMemory {
		exports = append(exports, append(str("memory"), 0x02, 0x00))
	}
	out = append(out, section(1, vec(types...))...)
	if len(imps) > 0 {
		out = append(out, section(2, vec(imps...))...)
	}
	out = append(out, section(3, vec(funcs...))...)
	if m.memoryPages > 0 {
		out = append(out, section(5, vec(append([]byte{0x00}, leb(uint32(m.memoryPages))...)))...)
	}
	out = append(out, section(7, vec(exports...))...)
	out = append(out, section(10, vec(codes...))...)
	if len(m.data) > 0 {
		seg := append([]byte{0x00}, i32const(1024)...)
		seg = append(seg, 0x0b)
		seg = append(seg, leb(uint32(len(m.data)))...)
		seg = append(seg, m.data...)
		out = append(out, section(11, vec(seg))...)
	}
	return out
}

const (
	tI32 = 0x7f
	tI64 = 0x7e
)

func i32const(v int32) []byte { return append([]byte{0x41}, sleb(int64(v))...) }
func i64const(v int64) []byte { return append([]byte{0x42}, sleb(v)...) }

func sleb(v int64) []byte {
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

// minimalGame is a valid ABI v1 module: metadata at address 1024 (written by a
// data-free trick: meta returns a slice of a memory region the host can read —
// here zeros, so tests that need valid metadata patch ludus_meta instead).
func abiFuncs(meta []byte) []wfunc {
	return []wfunc{
		{export: "ludus_abi_version", results: []byte{tI32}, body: i32const(1)},
		{export: "ludus_meta", results: []byte{tI64}, body: meta},
		{export: "ludus_buffer", params: []byte{tI32}, results: []byte{tI32}, body: i32const(4096)},
		{export: "ludus_init", params: []byte{tI64, tI32}, results: []byte{tI32}, body: i32const(0)},
		{export: "ludus_step", params: []byte{tI32}, results: []byte{tI32}, body: i32const(0)},
		{export: "ludus_view", params: []byte{tI32}, results: []byte{tI64}, body: i64const(0)},
		{export: "ludus_state_hash", results: []byte{tI64}, body: i64const(42)},
		{export: "ludus_result", results: []byte{tI64}, body: i64const(0)},
	}
}
