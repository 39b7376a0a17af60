package engine

// maxLocals bounds the locals of one function (parameters included). wazero
// allocates a slot per local before it validates the body; far fewer are
// enough for any real function.
const maxLocals = 50000

// maxModuleLocals bounds the locals the functions of a module declare in all
// (parameters, which belong to shared types, not counted). wazero's decoder
// keeps 8 bytes per declared local for as long as the compiled module lives,
// so maxLocals alone let a 24 KB module of 2,000 functions of 50,000 locals
// take 770 MiB to compile, and 10,000 such functions ran the process out of
// memory. At this bound a compile takes about 8 MiB and 50 ms for the
// locals, less than the 2.6 MB arena's own compile (~40 MiB); the built-in
// modules declare 7,259 (the arena), 6,400, 55 and 24 locals in all.
const maxModuleLocals = 1_000_000

// Function types. wazero builds a key string for each type in time and
// memory that grow with the square of its parameters: one type of 40,000
// parameters took 1.9 s and 2.4 GB to compile, 3,000 types of 1,000 took
// 5 GB, and 20,000 functions of a type each 5.5 s. A type may have at most
// maxTypeValues parameters and as many results (the Web's own limits), a
// module at most maxTypes types and maxModuleTypeValues parameters and
// results in all; the built-in modules have 8 to 15 types with 17 to 40 in
// all, the largest 4.
const (
	maxTypes            = 10_000
	maxTypeValues       = 1000
	maxModuleTypeValues = 50_000
)

// Tables. wazero gives every instance its own copy of each table, 8 bytes
// per entry, allocated at instantiation from the declared minimum (up to
// 2^27 entries, 1 GiB, for each table) and grown by table.grow up to 2^32
// entries — all outside the memory cap: a ludus_step growing a table by 2^26
// entries a few times took 51 s and 4 GiB, and by 2^28 it killed the process.
// So a module may declare at most maxTables tables holding at most
// maxTableEntries entries in all (512 KiB per instance), and its code may not
// grow a table (refuseTableGrow): every table keeps the size it declares, which
// is known at upload. Go's linker makes one table of 4,096 + one entry per
// function — the arena's has 5,903 (1,807 functions in 2.6 MB), and a Go
// module at the 32 MiB upload limit would have about 27,000 at its density;
// TinyGo, C and Rust tables hold only the functions whose address is taken
// (the C modules' have 1). Refusing table.grow rather than giving tables a
// maximum: compilers emit it only for code that adds functions to a table at
// run time (Emscripten's addFunction, wasm-bindgen's externref table, dynamic
// linking), which a game under this ABI has no use for, and tables that never
// grow need no rewriting of their types and no fuel charged for growing.
const (
	maxTables       = 100
	maxTableEntries = 1 << 16
)

// refuseTableGrow refuses function fn, whose code grows a table (the code
// rewriter calls it, having decoded every instruction; see maxTableEntries).
func refuseTableGrow(fn uint32) {
	irefuse("function %d uses table.grow, which the host does not allow: a module's tables keep the size they declare "+
		"(at most %d entries in all). Declare the table as large as the module needs and leave out code that adds functions "+
		"to it at run time (e.g. Emscripten's ALLOW_TABLE_GROWTH or addFunction)", fn, maxTableEntries)
}

// tables counts the tables of a module and their entries (their declared
// minimums) as checkFraming reads them, imported ones first.
type tables struct{ n, entries uint64 }

// add reads a table type from r — refusing the form with an initializer
// expression, which the code rewriter would not renumber — and refuses the
// module once its tables exceed the limits.
func (t *tables) add(r *wreader) {
	c := r.byte()
	if c == 0x40 {
		irefuse("table %d has an initializer expression, which the host does not support: "+
			"declare the table without one and fill it with an element segment", t.n)
	}
	if c == 0x63 || c == 0x64 {
		r.skipLEB(5)
	}
	flags := r.byte()
	min := r.u32()
	if flags&1 != 0 {
		r.u32()
	}
	t.n++
	t.entries += uint64(min)
	if t.n > maxTables {
		irefuse("the module declares more than %d tables, the most the host allows", maxTables)
	}
	if t.entries > maxTableEntries {
		irefuse("table %d declares a minimum size of %d entries, which brings the module's tables to %d entries; "+
			"the host allows at most %d in all tables together: declare smaller tables "+
			"(a table needs an entry only per function called through a pointer)", t.n-1, min, t.entries, maxTableEntries)
	}
}

// checkFraming walks every section of wasm and checks that each vector count
// and each length fits in the bytes that follow it, before wazero sees the
// module. wazero's decoder allocates what a count or a length says before it
// reads the entries — a 30-byte data section declaring 2^32 segments made it
// ask for 224 GB and killed the process, an export name of 2^28 bytes took
// 17 s — so a module of a few hundred bytes could take down the backend that
// validates uploads or a node that compiles it. With every count at most the
// bytes left (each entry takes at least one), wazero's allocations stay within
// a small multiple of the module's size. It checks framing only, not validity:
// wazero still does that. It also refuses a module over the limits on what
// wazero allocates for a count whatever the module's size: the locals of a
// function and of the whole module, and the tables (maxTableEntries).
func checkFraming(wasm []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			ie, ok := p.(*instrumentError)
			if !ok {
				panic(p)
			}
			err = ie
		}
	}()
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		ifail("not a WebAssembly binary")
	}
	r := &wreader{b: wasm, off: 8}
	var tabs tables
	var importedFuncs uint32
	for !r.eof() {
		id := r.byte()
		s := &wreader{b: r.take(int(r.u32()))}
		switch id {
		case 0: // custom
			s.name()
		case 1: // types
			n := vecCount(s, "type")
			if n > maxTypes {
				irefuse("the module declares %d function types; the host allows at most %d", n, maxTypes)
			}
			var values uint64
			for i := uint32(0); i < n; i++ {
				if f := s.byte(); f != 0x60 {
					ifail("unsupported type form 0x%x", f)
				}
				for _, what := range []string{"parameter", "result"} {
					k := vecCount(s, what)
					if k > maxTypeValues {
						irefuse("function type %d has %d %ss; the host allows at most %d", i, k, what, maxTypeValues)
					}
					s.take(int(k))
					if values += uint64(k); values > maxModuleTypeValues {
						irefuse("the module's function types have more than %d parameters and results in all, the most the host allows", maxModuleTypeValues)
					}
				}
			}
		case 2: // imports
			for n := vecCount(s, "import"); n > 0; n-- {
				s.name()
				s.name()
				switch kind := s.byte(); kind {
				case 0x00:
					s.u32()
					importedFuncs++
				case 0x01:
					tabs.add(s)
				case 0x02:
					skipLimits(s)
				case 0x03:
					refType(s)
					s.byte()
				case 0x04:
					s.byte()
					s.u32()
				default:
					ifail("unknown import kind %d", kind)
				}
			}
		case 3: // functions
			for n := vecCount(s, "function"); n > 0; n-- {
				s.u32()
			}
		case 4: // tables
			for n := vecCount(s, "table"); n > 0; n-- {
				tabs.add(s)
			}
		case 5: // memories
			for n := vecCount(s, "memory"); n > 0; n-- {
				skipLimits(s)
			}
		case 6: // globals
			for n := vecCount(s, "global"); n > 0; n-- {
				refType(s)
				s.byte()
				(&rewriter{}).constExpr(s, nil)
			}
		case 7: // exports
			for n := vecCount(s, "export"); n > 0; n-- {
				s.name()
				s.byte()
				s.u32()
			}
		case 8: // start
			s.u32()
		case 9: // elements
			vecCount(&wreader{b: s.b}, "element segment")
			(&rewriter{}).rewriteElems(s.b)
		case 10: // code
			var total uint64
			for i, n := uint32(0), vecCount(s, "function body"); i < n; i++ {
				body := &wreader{b: s.take(int(s.u32()))}
				var locals uint64
				for g := vecCount(body, "local group"); g > 0; g-- {
					if locals += uint64(body.u32()); locals > maxLocals {
						irefuse("function %d declares more than %d locals, the most the host allows in a function", importedFuncs+i, maxLocals)
					}
					refType(body)
				}
				total += locals
			}
			if total > maxModuleLocals {
				irefuse("the module's functions declare %d locals in all; the host allows at most %d in a module "+
					"(the host keeps 8 bytes per local for as long as it holds the compiled module): build with optimisations, which reuse locals, "+
					"and leave out code the game does not need", total, maxModuleLocals)
			}
		case 11: // data
			for n := vecCount(s, "data segment"); n > 0; n-- {
				switch flags := s.u32(); flags {
				case 0:
					(&rewriter{}).constExpr(s, nil)
				case 1:
				case 2:
					s.u32()
					(&rewriter{}).constExpr(s, nil)
				default:
					ifail("unknown data segment flags %d", flags)
				}
				s.take(int(s.u32()))
			}
		case 12: // data count
			s.u32()
		case 13: // tags
			for n := vecCount(s, "tag"); n > 0; n-- {
				s.byte()
				s.u32()
			}
		default:
			ifail("unknown section id %d", id)
		}
	}
	return nil
}

// vecCount reads a vector count and checks that as many entries of at least one
// byte fit in what is left of r.
func vecCount(r *wreader, what string) uint32 {
	n := r.u32()
	if left := len(r.b) - r.off; uint64(n) > uint64(left) {
		ifail("%s count %d at offset %d exceeds the %d bytes left", what, n, r.off, left)
	}
	return n
}

// refType reads a value type: one byte, or a reference type prefix (0x63,
// 0x64) and its heap type.
func refType(r *wreader) {
	if c := r.byte(); c == 0x63 || c == 0x64 {
		r.skipLEB(5)
	}
}
