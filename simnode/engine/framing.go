package engine

// maxLocals bounds the locals of one function (parameters included). wazero
// allocates a slot per local before it validates the body; far fewer are
// enough for any real function.
const maxLocals = 50000

// checkFraming walks every section of wasm and checks that each vector count
// and each length fits in the bytes that follow it, before wazero sees the
// module. wazero's decoder allocates what a count or a length says before it
// reads the entries — a 30-byte data section declaring 2^32 segments made it
// ask for 224 GB and killed the process, an export name of 2^28 bytes took
// 17 s — so a module of a few hundred bytes could take down the backend that
// validates uploads or a node that compiles it. With every count at most the
// bytes left (each entry takes at least one), wazero's allocations stay within
// a small multiple of the module's size. It checks framing only, not validity:
// wazero still does that.
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
	for !r.eof() {
		id := r.byte()
		s := &wreader{b: r.take(int(r.u32()))}
		switch id {
		case 0: // custom
			s.name()
		case 1: // types
			for n := vecCount(s, "type"); n > 0; n-- {
				if f := s.byte(); f != 0x60 {
					ifail("unsupported type form 0x%x", f)
				}
				s.take(int(vecCount(s, "parameter")))
				s.take(int(vecCount(s, "result")))
			}
		case 2: // imports
			for n := vecCount(s, "import"); n > 0; n-- {
				s.name()
				s.name()
				switch kind := s.byte(); kind {
				case 0x00:
					s.u32()
				case 0x01:
					refType(s)
					skipLimits(s)
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
				refType(s)
				skipLimits(s)
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
			for n := vecCount(s, "function body"); n > 0; n-- {
				body := &wreader{b: s.take(int(s.u32()))}
				var locals uint64
				for g := vecCount(body, "local group"); g > 0; g-- {
					if locals += uint64(body.u32()); locals > maxLocals {
						ifail("a function with more than %d locals", maxLocals)
					}
					refType(body)
				}
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
