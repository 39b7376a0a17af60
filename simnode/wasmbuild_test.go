package simnode

// A tiny WebAssembly binary builder for hostile test modules, copied from
// simnode/engine/wasmbuild_test.go (test helpers do not cross packages).

type wfunc struct {
	export  string
	params  []byte // value types: 0x7f i32, 0x7e i64
	results []byte
	body    []byte // instructions, without the final 0x0b
}

type wmodule struct {
	funcs        []wfunc
	memoryPages  int
	exportMemory bool
	data         []byte // written at address 1024 by an active data segment
}

const (
	tI32 = 0x7f
	tI64 = 0x7e
)

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

func vec(items ...[]byte) []byte {
	out := leb(uint32(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func wstr(s string) []byte { return append(leb(uint32(len(s))), s...) }

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, leb(uint32(len(body)))...), body...)
}

func functype(params, results []byte) []byte {
	out := append([]byte{0x60}, leb(uint32(len(params)))...)
	out = append(out, params...)
	out = append(out, leb(uint32(len(results)))...)
	return append(out, results...)
}

func i32const(v int32) []byte { return append([]byte{0x41}, sleb(int64(v))...) }
func i64const(v int64) []byte { return append([]byte{0x42}, sleb(v)...) }

func (m wmodule) bytes() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	var types, funcs, exports, codes [][]byte
	for i, f := range m.funcs {
		types = append(types, functype(f.params, f.results))
		funcs = append(funcs, leb(uint32(len(types)-1)))
		if f.export != "" {
			exports = append(exports, append(wstr(f.export), 0x00, byte(i)))
		}
		body := append([]byte{0x00}, f.body...)
		body = append(body, 0x0b)
		codes = append(codes, append(leb(uint32(len(body))), body...))
	}
	if m.exportMemory {
		exports = append(exports, append(wstr("memory"), 0x02, 0x00))
	}
	out = append(out, section(1, vec(types...))...)
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

// hostileMeta is valid metadata, placed at address 1024 by the data segment.
const hostileMeta = `{"name":"hostile","tick_rate":30,"max_players":2,"frame_divisor":1,"view_format":"raw"}`

// hostile returns a valid ABI v1 module whose export `which` has body instead
// of its harmless default; extra functions follow the ABI's (indices from 8).
func hostile(which string, body []byte, extra ...wfunc) []byte {
	funcs := []wfunc{
		{export: "ludus_abi_version", results: []byte{tI32}, body: i32const(1)},
		{export: "ludus_meta", results: []byte{tI64}, body: i64const(int64(1024)<<32 | int64(len(hostileMeta)))},
		{export: "ludus_buffer", params: []byte{tI32}, results: []byte{tI32}, body: i32const(4096)},
		{export: "ludus_init", params: []byte{tI64, tI32}, results: []byte{tI32}, body: i32const(0)},
		{export: "ludus_step", params: []byte{tI32}, results: []byte{tI32}, body: i32const(0)},
		{export: "ludus_view", params: []byte{tI32}, results: []byte{tI64}, body: i64const(0)},
		{export: "ludus_state_hash", results: []byte{tI64}, body: i64const(42)},
		{export: "ludus_result", results: []byte{tI64}, body: i64const(0)},
	}
	for i := range funcs {
		if funcs[i].export == which {
			funcs[i].body = body
		}
	}
	funcs = append(funcs, extra...)
	return wmodule{funcs: funcs, memoryPages: 1, exportMemory: true, data: []byte(hostileMeta)}.bytes()
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	// loop ... br 0 ... end: spins forever.
	spin = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}
	// deep(): deep() — unbounded recursion (function index 8).
	deepFunc = wfunc{body: []byte{0x10, 0x08}}
	// grow 16 pages at a time until memory.grow fails.
	bomb = []byte{0x03, 0x40, 0x41, 0x10, 0x40, 0x00, 0x41, 0x7f, 0x47, 0x0d, 0x00, 0x0b}
)
