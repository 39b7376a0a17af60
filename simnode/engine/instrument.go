package engine

// instrument.go rewrites a module's code section at compile time so that a guest
// stuck in a loop can be stopped (docs/RATIONALE.md, "Interrupting a runaway
// guest"). wazero cannot preempt machine code it generated, and its own
// WithCloseOnContextDone calls back into Go at every loop header, which made the
// arena's view ~10× slower. Instead we add, to the module itself:
//
//   - fuel mode (the default): a mutable i64 global, the fuel, and an import
//     ludus_engine.refill. Every function entry and every loop header subtracts a
//     static weight from the fuel — an upper bound of the instructions that can run
//     before the next check — and calls refill when it goes negative. Bulk memory
//     and table operations subtract their length / 64 first. refill, in Go, compares
//     the monotonic clock with the call's deadline (a second global the host sets
//     before each call) and either refills the fuel or panics, which unwinds the
//     guest with an error. The check runs on the guest's own thread, so it works
//     even when every P of the Go scheduler is busy running guests (a timer could not
//     fire then: Go cannot preempt wazero's machine code).
//     Fuel mode also bounds the call stack (docs/RATIONALE.md, "Why count the
//     call stack"): a third global, the stack budget, starts at StackLimit; every
//     function that calls others (and every big leaf) subtracts its frame cost —
//     an upper bound of its frame in wazero's machine code, from its code alone —
//     on entry and calls refill when the budget is overdrawn, which fails the call
//     with ErrStackOverflow; the body is wrapped in a block after which, and before
//     every return and tail call, the cost is added back. Exception handling,
//     which would unwind frames past their restores, is refused in this mode (the
//     engine does not enable it anyway).
//   - flag mode (measured, not the default): a mutable i32 global the host sets from a
//     timer; every function entry and loop header executes
//     `global.get $flag; if; unreachable; end`.
//
// Adding the import shifts the index of every function the module defines by one, so
// calls, ref.func, exports, the start function, element segments and the name section
// are renumbered. The rewriter understands every instruction wazero v1.12 accepts
// (MVP, sign extension, saturating truncation, bulk memory, reference types, SIMD,
// threads, tail calls, exception handling in flag mode); anything else is refused
// at upload.

import (
	"bytes"
	"errors"
	"fmt"
)

type interruptCode int

const (
	codeFuel interruptCode = iota
	codeFlag
)

const (
	// hostModule is the import module of the engine's own host functions. A game may
	// not import from it (checked by the rewriter).
	hostModule = "ludus_engine"
	hostRefill = "refill"
	// counterExport is the exported fuel (i64) or flag (i32) global.
	counterExport = "__ludus_engine_counter"
	// deadlineExport is the exported i64 global holding the current call's deadline
	// (fuel mode), in nanoseconds of the engine's monotonic clock; 0 means none.
	deadlineExport = "__ludus_engine_deadline"
	// stackExport is the exported i64 global holding what is left of the
	// instance's stack budget (fuel mode), in bytes of frame cost; it starts at
	// StackLimit. A counted function subtracts its cost on entry, calls refill if
	// that overdrew the budget (refill then fails the call with
	// ErrStackOverflow), and adds it back on every way out.
	stackExport = "__ludus_engine_stack"
)

// Frame costs (fuel mode). A call of a function that calls others — or of a
// big leaf — takes its frame cost, in bytes, of the instance's stack budget
// until it returns. The cost is meant to bound, from the function's code alone,
// its frame in wazero's machine code, which is mostly what the register
// allocator spills: one slot (8 bytes, 16 for v128) per spilled SSA value,
// never shared. Counted are the locals, one value per instruction, one per
// (block, local assigned in the block) for the phis at the block's merge or
// loop header, block parameters and results, and the argument and result area
// of the biggest call. TestFrameCostCoversWazeroFrames checks it against
// wazero's real frames: the worst shapes we could build (values live across
// the recursive call, phis of nested loops and ifs, 300 results) use at most
// 2/3 of their cost; Go and C code 1/25 or less (docs/RATIONALE.md, "Why count
// the call stack").
const (
	frameBase      = 64 // return address, frame pointer, stack check, alignment
	frameSlot      = 16 // per value
	frameInstr     = 8  // per instruction (a value of up to 8 bytes, most produce at most one)
	leafCountedMin = 4096
)

// frameStats are what a function's frame cost derives from.
type frameStats struct {
	locals   uint64 // parameters included
	instrs   int64  // v128.const counts twice (a 16-byte value from one instruction)
	phis     int64  // sum over blocks of min(locals, assignments in the block), plus block arities
	maxArity int64  // params + results of the biggest call
}

func (f frameStats) cost() int64 {
	return frameBase + frameSlot*(int64(f.locals)+f.phis+f.maxArity) + frameInstr*f.instrs
}

// bulkShift: bulk memory and table operations cost len>>bulkShift fuel.
const bulkShift = 6

// leafFree: a function without calls or loops whose body has at most this many
// instructions gets no entry check (it runs a bounded, short time).
const leafFree = 256

type instrumentError struct {
	msg string
	// refused marks a module the host will not take although it may well be
	// valid WebAssembly — it exceeds one of the host's limits or uses what the
	// host leaves out — so compile reports the message as it is, without
	// asking wazero for another explanation.
	refused bool
}

func (e *instrumentError) Error() string { return e.msg }

func ifail(format string, args ...any) {
	panic(&instrumentError{msg: fmt.Sprintf(format, args...)})
}

// irefuse is ifail for a refusal (see instrumentError.refused): the message
// is for the studio engineer and says what to change.
func irefuse(format string, args ...any) {
	panic(&instrumentError{msg: fmt.Sprintf(format, args...), refused: true})
}

// isRefusal reports whether err is a refusal made by irefuse.
func isRefusal(err error) bool {
	var ie *instrumentError
	return errors.As(err, &ie) && ie.refused
}

// errForbiddenHostImport marks a module that imports from the engine's own host module.
var errForbiddenHostImport = errors.New("imports from " + hostModule + ", which is reserved for the host")

type wreader struct {
	b   []byte
	off int
}

func (r *wreader) eof() bool { return r.off >= len(r.b) }

func (r *wreader) byte() byte {
	if r.off >= len(r.b) {
		ifail("unexpected end at offset %d", r.off)
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *wreader) take(n int) []byte {
	if n < 0 || r.off+n > len(r.b) || r.off+n < r.off {
		ifail("length %d beyond the end at offset %d", n, r.off)
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *wreader) u32() uint32 {
	var v uint32
	for shift := 0; ; shift += 7 {
		if shift >= 35 {
			ifail("LEB128 too long at offset %d", r.off)
		}
		c := r.byte()
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

// skipLEB skips a (signed or unsigned) LEB128 of at most max bytes.
func (r *wreader) skipLEB(max int) {
	for i := 0; ; i++ {
		if i >= max {
			ifail("LEB128 too long at offset %d", r.off)
		}
		if r.byte()&0x80 == 0 {
			return
		}
	}
}

func (r *wreader) name() []byte { return r.take(int(r.u32())) }

func appendU32(dst []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			dst = append(dst, c|0x80)
			continue
		}
		return append(dst, c)
	}
}

func appendS64(dst []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

type wsection struct {
	id   byte
	body []byte
}

// sectionRank is the order of non-custom sections in a module.
func sectionRank(id byte) int {
	switch id {
	case 13: // tag
		return 55
	case 12: // data count
		return 95
	default:
		return int(id) * 10
	}
}

type rewriter struct {
	code        interruptCode
	shift       uint32 // 1 when the refill import is added
	oldImported uint32 // imported functions before rewriting
	refillIdx   uint32 // function index of refill
	counterIdx  uint32 // global index of the counter
	deadlineIdx uint32
	stackIdx    uint32
	types       []wtype
	funcTypes   []uint32 // type index per defined function
	importTypes []uint32 // type index per imported function
	// blockTypes maps a type with several results to the type index of
	// () -> those results, added for the block that wraps a function body.
	blockTypes map[uint32]uint32
}

type wtype struct {
	params  int
	results []byte
}

func (w *rewriter) fn(idx uint32) uint32 {
	if idx >= w.oldImported {
		return idx + w.shift
	}
	return idx
}

// instrument returns wasm rewritten for interruption (see the file comment).
func instrument(wasm []byte, code interruptCode) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			ie, ok := p.(*instrumentError)
			if !ok {
				panic(p)
			}
			out, err = nil, ie
		}
	}()
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], []byte{0, 'a', 's', 'm', 1, 0, 0, 0}) {
		ifail("not a WebAssembly 1.0 binary")
	}
	r := &wreader{b: wasm, off: 8}
	var secs []wsection
	lastRank := 0
	for !r.eof() {
		id := r.byte()
		body := r.take(int(r.u32()))
		if id != 0 {
			if id > 13 {
				ifail("unknown section id %d", id)
			}
			rank := sectionRank(id)
			if rank <= lastRank {
				ifail("section %d out of order", id)
			}
			lastRank = rank
		}
		secs = append(secs, wsection{id, body})
	}
	w := &rewriter{code: code}
	find := func(id byte) []byte {
		for _, s := range secs {
			if s.id == id {
				return s.body
			}
		}
		return nil
	}
	// Pass 1: what the renumbering needs.
	w.types = parseTypes(find(1))
	var importedGlobals uint32
	if b := find(2); b != nil {
		ir := &wreader{b: b}
		for n := ir.u32(); n > 0; n-- {
			mod, name := ir.name(), ir.name()
			if string(mod) == hostModule {
				return nil, fmt.Errorf("%w (%s.%s)", errForbiddenHostImport, mod, name)
			}
			switch kind := ir.byte(); kind {
			case 0x00:
				w.importTypes = append(w.importTypes, ir.u32())
				w.oldImported++
			case 0x01:
				ir.byte()
				skipLimits(ir)
			case 0x02:
				skipLimits(ir)
			case 0x03:
				ir.byte()
				ir.byte()
				importedGlobals++
			case 0x04:
				ir.byte()
				ir.u32()
			default:
				ifail("unknown import kind %d", kind)
			}
		}
		if !ir.eof() {
			ifail("trailing bytes in the import section")
		}
	}
	if b := find(3); b != nil {
		fr := &wreader{b: b}
		for n := fr.u32(); n > 0; n-- {
			t := fr.u32()
			if int(t) >= len(w.types) {
				ifail("function of unknown type %d", t)
			}
			w.funcTypes = append(w.funcTypes, t)
		}
	}
	var definedGlobals uint32
	if b := find(6); b != nil {
		definedGlobals = (&wreader{b: b}).u32()
	}
	w.counterIdx = importedGlobals + definedGlobals
	w.deadlineIdx = w.counterIdx + 1
	w.stackIdx = w.counterIdx + 2
	newType := uint32(len(w.types))
	if code == codeFuel {
		w.shift = 1
		w.refillIdx = w.oldImported
		w.blockTypes = map[uint32]uint32{}
		for i, t := range w.types {
			if len(t.results) > 1 {
				w.blockTypes[uint32(i)] = newType + 1 + uint32(len(w.blockTypes))
			}
		}
	}

	// Pass 2: rewrite, adding the sections we need where they are missing.
	pending := map[byte][]byte{}
	if code == codeFuel {
		if find(1) == nil {
			pending[1] = w.rewriteTypes(nil, newType)
		}
		if find(2) == nil {
			pending[2] = w.rewriteImports(nil, newType)
		}
	}
	if find(6) == nil {
		pending[6] = w.rewriteGlobals(nil)
	}
	if find(7) == nil {
		pending[7] = w.rewriteExports(nil)
	}
	out = append(make([]byte, 0, len(wasm)+len(wasm)/8), wasm[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	flush := func(rank int) {
		for _, id := range []byte{1, 2, 6, 7} {
			if b, ok := pending[id]; ok && sectionRank(id) < rank {
				emit(id, b)
				delete(pending, id)
			}
		}
	}
	for _, s := range secs {
		if s.id != 0 {
			flush(sectionRank(s.id))
		}
		body := s.body
		switch s.id {
		case 0:
			body = w.rewriteCustom(body)
		case 1:
			if code == codeFuel {
				body = w.rewriteTypes(body, newType)
			}
		case 2:
			if code == codeFuel {
				body = w.rewriteImports(body, newType)
			}
		case 6:
			body = w.rewriteGlobals(body)
		case 7:
			body = w.rewriteExports(body)
		case 8:
			sr := &wreader{b: body}
			body = appendU32(nil, w.fn(sr.u32()))
		case 9:
			body = w.rewriteElems(body)
		case 10:
			body = w.rewriteCode(body)
		}
		if body != nil {
			emit(s.id, body)
		}
	}
	flush(1 << 30)
	return out, nil
}

func parseTypes(b []byte) []wtype {
	if b == nil {
		return nil
	}
	r := &wreader{b: b}
	n := r.u32()
	var out []wtype
	for ; n > 0; n-- {
		if f := r.byte(); f != 0x60 {
			ifail("unsupported type form 0x%x", f)
		}
		np := r.u32()
		r.take(int(np))
		nr := r.u32()
		out = append(out, wtype{params: int(np), results: r.take(int(nr))})
	}
	return out
}

func skipLimits(r *wreader) {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

func (w *rewriter) rewriteTypes(b []byte, newType uint32) []byte {
	out := appendU32(nil, newType+1+uint32(len(w.blockTypes)))
	if b != nil {
		r := &wreader{b: b}
		r.u32()
		out = append(out, b[r.off:]...)
	}
	out = append(out, 0x60, 0, 0) // () -> (), refill
	// () -> results, in the order of blockTypes' indices
	for _, t := range w.types {
		if len(t.results) > 1 {
			out = append(out, 0x60, 0)
			out = appendU32(out, uint32(len(t.results)))
			out = append(out, t.results...)
		}
	}
	return out
}

func (w *rewriter) rewriteImports(b []byte, newType uint32) []byte {
	var n uint32
	var rest []byte
	if b != nil {
		r := &wreader{b: b}
		n = r.u32()
		rest = b[r.off:]
	}
	out := appendU32(nil, n+1)
	out = append(out, rest...)
	out = appendU32(out, uint32(len(hostModule)))
	out = append(out, hostModule...)
	out = appendU32(out, uint32(len(hostRefill)))
	out = append(out, hostRefill...)
	out = append(out, 0x00)
	return appendU32(out, newType)
}

// constExpr copies a constant expression, renumbering ref.func.
func (w *rewriter) constExpr(r *wreader, out []byte) []byte {
	for {
		start := r.off
		op := r.byte()
		switch op {
		case 0x0b:
			return append(out, op)
		case 0xd2:
			out = append(out, op)
			out = appendU32(out, w.fn(r.u32()))
			continue
		case 0x41, 0x42:
			r.skipLEB(10)
		case 0x43:
			r.take(4)
		case 0x44:
			r.take(8)
		case 0x23:
			r.u32()
		case 0xd0:
			r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant expressions
		case 0xfd:
			if sub := r.u32(); sub != 12 {
				ifail("unsupported SIMD instruction %d in a constant expression", sub)
			}
			r.take(16)
		default:
			ifail("unsupported instruction 0x%x in a constant expression", op)
		}
		out = append(out, r.b[start:r.off]...)
	}
}

func (w *rewriter) rewriteGlobals(b []byte) []byte {
	var n uint32
	r := &wreader{b: b}
	if b != nil {
		n = r.u32()
	}
	added := uint32(1)
	if w.code == codeFuel {
		added = 3
	}
	out := appendU32(nil, n+added)
	for i := uint32(0); i < n; i++ {
		vt := r.byte()
		if vt == 0x63 || vt == 0x64 { // typed references are not in wazero v1.12
			ifail("unsupported global type 0x%x", vt)
		}
		out = append(out, vt, r.byte())
		out = w.constExpr(r, out)
	}
	if b != nil && !r.eof() {
		ifail("trailing bytes in the global section")
	}
	if w.code == codeFuel {
		out = append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b)            // fuel: mut i64 = 0
		out = append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b)            // deadline: mut i64 = 0
		out = appendS64(append(out, 0x7e, 0x01, 0x42), StackLimit) // stack budget: mut i64 = StackLimit
		out = append(out, 0x0b)
	} else {
		out = append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b) // flag: mut i32 = 0
	}
	return out
}

func (w *rewriter) rewriteExports(b []byte) []byte {
	var n uint32
	r := &wreader{b: b}
	if b != nil {
		n = r.u32()
	}
	added := uint32(1)
	if w.code == codeFuel {
		added = 3
	}
	out := appendU32(nil, n+added)
	for i := uint32(0); i < n; i++ {
		name := r.name()
		if string(name) == counterExport || string(name) == deadlineExport || string(name) == stackExport {
			ifail("exports %s, a name reserved for the host", name)
		}
		kind := r.byte()
		idx := r.u32()
		if kind == 0x00 {
			idx = w.fn(idx)
		}
		out = appendU32(out, uint32(len(name)))
		out = append(out, name...)
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	if b != nil && !r.eof() {
		ifail("trailing bytes in the export section")
	}
	exp := func(name string, idx uint32) {
		out = appendU32(out, uint32(len(name)))
		out = append(out, name...)
		out = append(out, 0x03)
		out = appendU32(out, idx)
	}
	exp(counterExport, w.counterIdx)
	if w.code == codeFuel {
		exp(deadlineExport, w.deadlineIdx)
		exp(stackExport, w.stackIdx)
	}
	return out
}

func (w *rewriter) rewriteElems(b []byte) []byte {
	r := &wreader{b: b}
	n := r.u32()
	out := appendU32(nil, n)
	copyTo := func(start int) { out = append(out, r.b[start:r.off]...) }
	for ; n > 0; n-- {
		flags := r.u32()
		if flags > 7 {
			ifail("unknown element segment flags %d", flags)
		}
		out = appendU32(out, flags)
		if flags&1 == 0 { // active
			if flags&2 != 0 {
				s := r.off
				r.u32() // table index
				copyTo(s)
			}
			out = w.constExpr(r, out)
		}
		if flags&3 != 0 { // elemkind or reftype
			out = append(out, r.byte())
		}
		count := r.u32()
		out = appendU32(out, count)
		for ; count > 0; count-- {
			if flags&4 == 0 {
				out = appendU32(out, w.fn(r.u32()))
			} else {
				out = w.constExpr(r, out)
			}
		}
	}
	if !r.eof() {
		ifail("trailing bytes in the element section")
	}
	return out
}

// rewriteCustom renumbers functions in the name section (function and local
// names); other custom sections are kept as they are.
func (w *rewriter) rewriteCustom(b []byte) []byte {
	r := &wreader{b: b}
	name := r.name()
	if string(name) != "name" || w.shift == 0 {
		return b
	}
	defer func() {
		if p := recover(); p != nil { // a damaged name section is dropped, not fatal
			if _, ok := p.(*instrumentError); !ok {
				panic(p)
			}
		}
	}()
	out := appendU32(nil, uint32(len(name)))
	out = append(out, name...)
	for !r.eof() {
		id := r.byte()
		sub := &wreader{b: r.take(int(r.u32()))}
		var nb []byte
		switch id {
		case 0:
			nb = sub.b
		case 1: // function names: namemap
			nb = w.nameMap(sub, nil)
		case 2: // local names: indirect namemap
			cnt := sub.u32()
			nb = appendU32(nil, cnt)
			for ; cnt > 0; cnt-- {
				nb = appendU32(nb, w.fn(sub.u32()))
				lc := sub.u32()
				nb = appendU32(nb, lc)
				for ; lc > 0; lc-- {
					nb = appendU32(nb, sub.u32())
					nm := sub.name()
					nb = appendU32(nb, uint32(len(nm)))
					nb = append(nb, nm...)
				}
			}
		default:
			continue // other subsections index functions too; drop them
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(nb)))
		out = append(out, nb...)
	}
	return out
}

func (w *rewriter) nameMap(r *wreader, out []byte) []byte {
	cnt := r.u32()
	out = appendU32(out, cnt)
	for ; cnt > 0; cnt-- {
		out = appendU32(out, w.fn(r.u32()))
		nm := r.name()
		out = appendU32(out, uint32(len(nm)))
		out = append(out, nm...)
	}
	return out
}

// instr kinds the code rewriter cares about.
const (
	kOther = iota
	kLoop
	kCall    // call / return_call: function index immediate
	kCallInd // call_indirect / return_call_indirect
	kRefFunc
	kBulk // takes a length as its last operand
	kEH   // exception handling: try, catch, throw, rethrow, delegate, catch_all, throw_ref, try_table
)

type instr struct {
	start, end int // bytes of the instruction
	immAt      int // kCall/kRefFunc: offset of the function index
	kind       int
}

func (w *rewriter) rewriteCode(b []byte) []byte {
	r := &wreader{b: b}
	n := r.u32()
	if int(n) != len(w.funcTypes) {
		ifail("%d function bodies for %d functions", n, len(w.funcTypes))
	}
	out := appendU32(make([]byte, 0, len(b)+len(b)/4), n)
	var instrs []instr
	for i := uint32(0); i < n; i++ {
		fb := r.take(int(r.u32()))
		var nb []byte
		nb, instrs = w.rewriteBody(fb, w.oldImported+i, w.funcTypes[i], instrs[:0])
		out = appendU32(out, uint32(len(nb)))
		out = append(out, nb...)
	}
	if !r.eof() {
		ifail("trailing bytes in the code section")
	}
	return out
}

// rewriteBody rewrites the body fb of function fn (its index in the module
// as uploaded), of type typ.
func (w *rewriter) rewriteBody(fb []byte, fn, typ uint32, instrs []instr) ([]byte, []instr) {
	r := &wreader{b: fb}
	groups := r.u32()
	groupsEnd := r.off
	var nlocals uint64 = uint64(w.types[typ].params)
	for g := uint32(0); g < groups; g++ {
		nlocals += uint64(r.u32())
		r.byte()
	}
	if nlocals > 50000 {
		ifail("too many locals")
	}
	localsEnd := r.off
	hasCall, hasBulk := false, false
	st := frameStats{locals: nlocals}
	var blocks []int64 // assignments before each open block
	var assigns int64
	for !r.eof() {
		in := decodeInstr(r)
		st.instrs++
		switch fb[in.start] {
		case 0x02, 0x03, 0x04: // block, loop, if
			blocks = append(blocks, assigns)
			st.phis += w.blockArity(fb, in.start+1)
		case 0x0b:
			if n := len(blocks); n > 0 {
				st.phis += min(int64(nlocals), assigns-blocks[n-1])
				blocks = blocks[:n-1]
			}
		case 0x21, 0x22: // local.set, local.tee
			assigns++
		case 0x23, 0x24: // global.get, global.set
			// The rewriter's own globals (fuel, deadline, stack budget) come
			// right after the module's: an index the module does not have
			// would name one of them once they exist, and wazero validates
			// only the rewritten module, so it would let the guest reset its
			// own limits.
			if idx := (&wreader{b: fb, off: in.start + 1}).u32(); idx >= w.counterIdx {
				ifail("global %d does not exist (the module has %d globals)", idx, w.counterIdx)
			}
		case 0x10, 0x12: // call, return_call
			st.maxArity = max(st.maxArity, w.arity(w.funcType((&wreader{b: fb, off: in.immAt}).u32())))
		case 0x11, 0x13: // call_indirect, return_call_indirect
			st.maxArity = max(st.maxArity, w.arity((&wreader{b: fb, off: in.start + 1}).u32()))
		case 0xfc:
			if (&wreader{b: fb, off: in.start + 1}).u32() == 15 {
				refuseTableGrow(fn)
			}
		case 0xfd:
			if (&wreader{b: fb, off: in.start + 1}).u32() == 12 { // v128.const
				st.instrs++
			}
		}
		switch in.kind {
		case kCall, kCallInd:
			hasCall = true
		case kBulk:
			hasBulk = true
		case kEH:
			if w.code == codeFuel {
				// A throw would leave the frames it unwinds counted on the stack budget.
				ifail("exception handling is not supported")
			}
		}
		instrs = append(instrs, in)
	}
	if len(instrs) == 0 || fb[len(fb)-1] != 0x0b {
		ifail("function body does not end with end")
	}
	fuel := w.code == codeFuel
	// Added locals, after the function's own: an i32 for bulk operations' lengths,
	// an i64 for the stack budget left after the entry.
	tmp, left := uint32(nlocals), uint32(nlocals)
	// Leaf functions cannot recurse: one small leaf frame on top of the stack is
	// slack (StackSlack).
	cost := st.cost()
	counted := fuel && (hasCall || cost > leafCountedMin)
	var added []byte
	if hasBulk && fuel {
		added = append(added, 1, 0x7f)
		left++
	}
	if counted {
		added = append(added, 1, 0x7e)
	}
	out := make([]byte, 0, len(fb)+len(fb)/4+32)
	if len(added) > 0 {
		out = appendU32(out, groups+uint32(len(added)/2))
		out = append(out, fb[groupsEnd:localsEnd]...)
		out = append(out, added...)
	} else {
		out = append(out, fb[:localsEnd]...)
	}
	total := len(instrs)
	if counted {
		// global.get $stack; i64.const cost; i64.sub; local.tee $left; global.set $stack;
		// local.get $left; i64.const 0; i64.lt_s; if; call refill; end — refill fails
		// the call, the budget being overdrawn.
		out = append(out, 0x23)
		out = appendU32(out, w.stackIdx)
		out = append(out, 0x42)
		out = appendS64(out, cost)
		out = append(out, 0x7d, 0x22)
		out = appendU32(out, left)
		out = append(out, 0x24)
		out = appendU32(out, w.stackIdx)
		out = append(out, 0x20)
		out = appendU32(out, left)
		out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40, 0x10)
		out = appendU32(out, w.refillIdx)
		out = append(out, 0x0b)
		// The body goes into a block so that a branch out of the function body
		// lands on the restore below: the block takes the body's label.
		out = append(out, 0x02)
		switch res := w.types[typ].results; len(res) {
		case 0:
			out = append(out, 0x40)
		case 1:
			out = append(out, res[0])
		default:
			out = appendS64(out, int64(w.blockTypes[typ]))
		}
	}
	restore := func() { // global.get $stack; i64.const cost; i64.add; global.set $stack
		out = append(out, 0x23)
		out = appendU32(out, w.stackIdx)
		out = append(out, 0x42)
		out = appendS64(out, cost)
		out = append(out, 0x7c, 0x24)
		out = appendU32(out, w.stackIdx)
	}
	first := loopFirst(fb, instrs)
	if (hasCall || total > leafFree) && first < 0 {
		out = w.probe(out, int64(total))
	}
	for i, in := range instrs {
		if counted {
			switch op := fb[in.start]; {
			case op == 0x0f || op == 0x12 || op == 0x13: // return, return_call, return_call_indirect
				restore()
			case i == total-1: // the end of the body: close the block, restore
				out = append(out, 0x0b)
				restore()
			}
		}
		switch in.kind {
		case kCall, kRefFunc:
			out = append(out, fb[in.start:in.immAt]...)
			ir := &wreader{b: fb, off: in.immAt}
			out = appendU32(out, w.fn(ir.u32()))
			out = append(out, fb[ir.off:in.end]...)
			continue
		case kBulk:
			if fuel {
				// local.set $tmp; fuel -= $tmp >> bulkShift; local.get $tmp
				out = append(out, 0x21)
				out = appendU32(out, tmp)
				out = append(out, 0x23)
				out = appendU32(out, w.counterIdx)
				out = append(out, 0x20)
				out = appendU32(out, tmp)
				out = append(out, 0xad, 0x42, bulkShift, 0x88, 0x7d, 0x24) // i64.extend_i32_u, i64.const, i64.shr_u, i64.sub, global.set
				out = appendU32(out, w.counterIdx)
				out = append(out, 0x20)
				out = appendU32(out, tmp)
			}
		}
		out = append(out, fb[in.start:in.end]...)
		if in.kind == kLoop {
			out = w.probe(out, int64(total-i))
		}
	}
	return out, instrs
}

// funcType returns the type index of function idx (0 if there is none: wazero
// refuses the module then).
func (w *rewriter) funcType(idx uint32) uint32 {
	switch {
	case idx < w.oldImported:
		return w.importTypes[idx]
	case int(idx-w.oldImported) < len(w.funcTypes):
		return w.funcTypes[idx-w.oldImported]
	}
	return 0
}

// arity is the number of parameters and results of type t.
func (w *rewriter) arity(t uint32) int64 {
	if int(t) >= len(w.types) {
		return 0
	}
	return int64(w.types[t].params + len(w.types[t].results))
}

// blockArity is the number of parameters and results of the block type at off.
func (w *rewriter) blockArity(fb []byte, off int) int64 {
	switch c := fb[off]; c {
	case 0x40:
		return 0
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return 1
	}
	// s33 type index: non-negative here, or wazero refuses the module
	var v uint64
	for i, shift := off, 0; i < len(fb) && shift < 35; i, shift = i+1, shift+7 {
		v |= uint64(fb[i]&0x7f) << shift
		if fb[i]&0x80 == 0 {
			break
		}
	}
	if v >= 1<<32 {
		return 0
	}
	return w.arity(uint32(v))
}

// loopFirst returns the index of the loop header that every execution of the
// function reaches after a few straight-line instructions (as in Go's
// prologue, global.get SP; local.set; block; loop), so that the entry check is
// redundant, or -1.
func loopFirst(fb []byte, instrs []instr) int {
	for i := 0; i < len(instrs) && i < 8; i++ {
		switch in := instrs[i]; {
		case in.kind == kLoop:
			return i
		case fb[in.start] == 0x02 || fb[in.start] == 0x01 || (fb[in.start] >= 0x20 && fb[in.start] <= 0x24) ||
			fb[in.start] == 0x41 || fb[in.start] == 0x42:
		default:
			return -1
		}
	}
	return -1
}

// probe appends the check executed at a function entry or loop header; weight
// bounds the instructions that can run before the next check.
func (w *rewriter) probe(out []byte, weight int64) []byte {
	if w.code == codeFlag {
		out = append(out, 0x23)
		out = appendU32(out, w.counterIdx)
		return append(out, 0x04, 0x40, 0x00, 0x0b) // if; unreachable; end
	}
	// fuel -= weight; if fuel < 0 { refill() }
	out = append(out, 0x23)
	out = appendU32(out, w.counterIdx)
	out = append(out, 0x42)
	out = appendS64(out, weight)
	out = append(out, 0x7d, 0x24) // i64.sub, global.set
	out = appendU32(out, w.counterIdx)
	out = append(out, 0x23)
	out = appendU32(out, w.counterIdx)
	out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40, 0x10) // i64.const 0, i64.lt_s, if, call
	out = appendU32(out, w.refillIdx)
	return append(out, 0x0b)
}

func skipBlockType(r *wreader) {
	c := r.b[r.off:]
	if len(c) == 0 {
		ifail("unexpected end in a block type")
	}
	switch c[0] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
	default:
		r.skipLEB(5) // s33 type index
	}
}

func skipMemarg(r *wreader) {
	r.u32()
	r.u32()
}

// decodeInstr reads one instruction.
func decodeInstr(r *wreader) instr {
	in := instr{start: r.off}
	op := r.byte()
	switch {
	case op == 0x02 || op == 0x04 || op == 0x06: // block, if, try
		skipBlockType(r)
	case op == 0x03:
		skipBlockType(r)
		in.kind = kLoop
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b ||
		op == 0x19 || op == 0x0a || op == 0xd1 || op == 0xd3 || op == 0xd4 || (op >= 0x45 && op <= 0xc4):
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0x0c || op == 0x0d ||
		(op >= 0x20 && op <= 0x26) || op == 0xd5 || op == 0xd6:
		r.u32()
	case op == 0x0e:
		for n := r.u32(); n > 0; n-- {
			r.u32()
		}
		r.u32()
	case op == 0x10 || op == 0x12:
		in.kind = kCall
		in.immAt = r.off
		r.u32()
	case op == 0x11 || op == 0x13:
		in.kind = kCallInd
		r.u32()
		r.u32()
	case op == 0x14 || op == 0x15:
		in.kind = kCallInd
		r.u32()
	case op == 0x1c:
		for n := r.u32(); n > 0; n-- {
			r.byte()
		}
	case op == 0x1f: // try_table
		skipBlockType(r)
		for n := r.u32(); n > 0; n-- {
			switch k := r.byte(); k {
			case 0, 1:
				r.u32()
				r.u32()
			case 2, 3:
				r.u32()
			default:
				ifail("unknown catch kind %d", k)
			}
		}
	case op >= 0x28 && op <= 0x3e:
		skipMemarg(r)
	case op == 0x3f || op == 0x40:
		r.u32()
	case op == 0x41 || op == 0x42:
		r.skipLEB(10)
	case op == 0x43:
		r.take(4)
	case op == 0x44:
		r.take(8)
	case op == 0xd0:
		r.byte()
	case op == 0xd2:
		in.kind = kRefFunc
		in.immAt = r.off
		r.u32()
	case op == 0xfc:
		switch sub := r.u32(); {
		case sub <= 7:
		case sub == 8: // memory.init
			r.u32()
			r.u32()
			in.kind = kBulk
		case sub == 9 || sub == 13 || sub == 15 || sub == 16:
			r.u32()
		case sub == 10: // memory.copy
			r.u32()
			r.u32()
			in.kind = kBulk
		case sub == 11: // memory.fill
			r.u32()
			in.kind = kBulk
		case sub == 12 || sub == 14: // table.init, table.copy
			r.u32()
			r.u32()
			in.kind = kBulk
		case sub == 17: // table.fill
			r.u32()
			in.kind = kBulk
		default:
			ifail("unknown instruction 0xfc %d", sub)
		}
	case op == 0xfd:
		switch sub := r.u32(); {
		case sub <= 11 || sub == 92 || sub == 93:
			skipMemarg(r)
		case sub == 12 || sub == 13:
			r.take(16)
		case sub >= 21 && sub <= 34:
			r.byte()
		case sub >= 84 && sub <= 91:
			skipMemarg(r)
			r.byte()
		case sub <= 0x113:
		default:
			ifail("unknown SIMD instruction %d", sub)
		}
	case op == 0xfe:
		sub := r.u32()
		if sub == 3 {
			r.byte()
		} else if sub <= 0x4e {
			skipMemarg(r)
		} else {
			ifail("unknown atomic instruction %d", sub)
		}
	default:
		ifail("unknown instruction 0x%x at offset %d", op, in.start)
	}
	switch op {
	case 0x06, 0x07, 0x08, 0x09, 0x0a, 0x18, 0x19, 0x1f:
		in.kind = kEH
	}
	in.end = r.off
	return in
}
