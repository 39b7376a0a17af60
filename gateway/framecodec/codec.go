// Package framecodec encodes a stream of views (the opaque frames a game renders)
// for one client: a keyframe, then deltas against the last frame that client was
// sent, with a keyframe again periodically and whenever the encoder is reset (a new
// stream or a re-attach).
//
// A payload is an 8-byte header followed by a body. The body, once decompressed
// (raw deflate for browsers, zstd for native clients, or stored), is a run-length
// coding of the XOR of the frame with its base (all zeros for a keyframe): zero
// runs are skipped, changed spans are sent as XORed literal bytes. The exact byte
// format is in docs/STREAMS.md; web/src/codec.ts is the browser's decoder and both
// decoders are checked against the vectors in testdata/.
//
// An Encoder or a Decoder belongs to one stream and is not safe for concurrent use.
// Their memory is one frame (the base) plus a scratch buffer; compressors are
// pooled and shared by all streams, since every payload is compressed on its own.
package framecodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// Compression is how a payload's body is compressed.
type Compression uint8

// Compressions; the values are the header's compression field.
const (
	// Stored: the body is the run-length coding itself (tests, debugging).
	Stored Compression = 0
	// Deflate: raw deflate (RFC 1951), what browsers decode with
	// DecompressionStream("deflate-raw").
	Deflate Compression = 1
	// Zstd: a Zstandard frame (RFC 8878) that declares its content size.
	Zstd Compression = 2
)

func (c Compression) String() string {
	switch c {
	case Stored:
		return "stored"
	case Deflate:
		return "deflate"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// Format constants.
const (
	// HeaderSize is the size of a payload's header.
	HeaderSize = 8
	// Version is the format version this package reads and writes.
	Version = 1
	// DefaultMaxRawSize is the largest frame a Decoder accepts unless told otherwise.
	DefaultMaxRawSize = 16 << 20
	// DefaultKeyframeFrames is the keyframe interval in frames when no tick-based
	// interval is set: 2 s at 17.5 frames/s.
	DefaultKeyframeFrames = 35
	// MinGap is the shortest run of unchanged bytes the encoder skips; shorter
	// runs travel inside a literal (XOR 0), which costs less than two varints.
	MinGap = 8

	magic0, magic1 = 'L', 'F'
	flagKeyframe   = 1
	compShift      = 1
	compMask       = 0b111 << compShift
)

// Errors, wrapped with details by the functions that return them.
var (
	// ErrMalformed: the payload is not a valid frame of this format.
	ErrMalformed = errors.New("framecodec: malformed frame")
	// ErrTooLarge: the frame (declared or decompressed) exceeds the limit.
	ErrTooLarge = errors.New("framecodec: frame too large")
	// ErrNoBase: a delta arrived but the decoder has no frame of that size to
	// apply it to (a delta must follow a keyframe of the same stream).
	ErrNoBase = errors.New("framecodec: delta without a base frame")
)

// Header is a payload's decoded header.
type Header struct {
	Keyframe    bool
	Compression Compression
	// RawSize is the size of the frame the payload decodes to.
	RawSize int
}

// ParseHeader decodes and checks a payload's header.
func ParseHeader(p []byte) (Header, error) {
	if len(p) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(p), HeaderSize)
	}
	if p[0] != magic0 || p[1] != magic1 {
		return Header{}, fmt.Errorf("%w: bad magic %q (want \"LF\")", ErrMalformed, p[:2])
	}
	if p[2] != Version {
		return Header{}, fmt.Errorf("%w: version %d (this decoder reads version %d)", ErrMalformed, p[2], Version)
	}
	flags := p[3]
	if flags&^(flagKeyframe|compMask) != 0 {
		return Header{}, fmt.Errorf("%w: unknown flags 0x%02x", ErrMalformed, flags)
	}
	h := Header{
		Keyframe:    flags&flagKeyframe != 0,
		Compression: Compression((flags & compMask) >> compShift),
		RawSize:     int(binary.LittleEndian.Uint32(p[4:8])),
	}
	if h.Compression > Zstd {
		return Header{}, fmt.Errorf("%w: unknown compression %d", ErrMalformed, h.Compression)
	}
	return h, nil
}

func appendHeader(dst []byte, h Header) []byte {
	flags := byte(h.Compression) << compShift
	if h.Keyframe {
		flags |= flagKeyframe
	}
	dst = append(dst, magic0, magic1, Version, flags)
	return binary.LittleEndian.AppendUint32(dst, uint32(h.RawSize))
}

// maxBody bounds a decompressed body: a valid coding of n bytes never needs more
// than 2n+16 bytes (the encoder's output is at most n+10).
func maxBody(n int) int { return 2*n + 16 }

// EncoderOptions configure an Encoder.
type EncoderOptions struct {
	Compression Compression
	// Level is the deflate level, 1 (fastest, the default) to 9.
	Level int
	// KeyframeTicks, if positive, sends a keyframe when a frame's tick is at least
	// this many ticks after the last keyframe's (2 s = 2 × tick rate).
	KeyframeTicks int64
	// KeyframeFrames sends a keyframe after this many frames since the last one
	// when KeyframeTicks is 0. Default DefaultKeyframeFrames.
	KeyframeFrames int
}

// Encoder encodes one client's frames. Its zero value is not usable; see NewEncoder.
type Encoder struct {
	opt      EncoderOptions
	base     []byte // the last frame encoded: what the client holds once it gets it
	haveBase bool
	baseTick int64
	keyTick  int64
	sinceKey int
	forceKey bool
}

// NewEncoder returns an encoder whose first frame will be a keyframe.
func NewEncoder(opt EncoderOptions) *Encoder {
	if opt.Level < 1 || opt.Level > 9 {
		opt.Level = flate.BestSpeed
	}
	if opt.KeyframeFrames <= 0 {
		opt.KeyframeFrames = DefaultKeyframeFrames
	}
	return &Encoder{opt: opt}
}

// SetKeyframeTicks sets the tick-based keyframe interval (e.g. once the stream
// reports its tick rate); 0 falls back to the frame count.
func (e *Encoder) SetKeyframeTicks(ticks int64) { e.opt.KeyframeTicks = ticks }

// Reset makes the next frame a keyframe: call it when the client's copy of the
// stream may have diverged (a re-attach to another node, a lost message).
func (e *Encoder) Reset() { e.forceKey = true }

// Info describes one encoded frame.
type Info struct {
	Keyframe bool
	// BaseTick is the tick of the frame a delta applies to (0 for keyframes).
	BaseTick int64
	RawSize  int
}

// MemoryBytes is the memory the encoder holds between frames.
func (e *Encoder) MemoryBytes() int { return cap(e.base) }

// Encode appends the payload for frame (rendered at tick) to dst. The frame is
// copied: the caller may reuse it afterwards.
func (e *Encoder) Encode(dst []byte, tick int64, frame []byte) ([]byte, Info, error) {
	if uint64(len(frame)) > 1<<32-1 {
		return dst, Info{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(frame))
	}
	key := !e.haveBase || e.forceKey || len(e.base) != len(frame) || tick < e.keyTick
	if !key {
		if e.opt.KeyframeTicks > 0 {
			key = tick-e.keyTick >= e.opt.KeyframeTicks
		} else {
			key = e.sinceKey >= e.opt.KeyframeFrames
		}
	}
	info := Info{Keyframe: key, RawSize: len(frame)}
	var base []byte
	if !key {
		base = e.base
		info.BaseTick = e.baseTick
	}
	sp := scratchPool.Get().(*[]byte)
	body := appendRLE((*sp)[:0], frame, base)
	dst = appendHeader(dst, Header{Keyframe: key, Compression: e.opt.Compression, RawSize: len(frame)})
	var err error
	dst, err = compress(dst, body, e.opt.Compression, e.opt.Level)
	*sp = body
	scratchPool.Put(sp)
	if err != nil {
		return dst, Info{}, err
	}
	if cap(e.base) < len(frame) {
		e.base = make([]byte, len(frame))
	}
	e.base = e.base[:len(frame)]
	copy(e.base, frame)
	e.haveBase, e.baseTick, e.forceKey = true, tick, false
	if key {
		e.keyTick, e.sinceKey = tick, 0
	}
	e.sinceKey++
	return dst, info, nil
}

// appendRLE appends the run-length coding of cur XOR base (base nil: zeros).
func appendRLE(dst, cur, base []byte) []byte {
	n := len(cur)
	for i := 0; i < n; {
		j := nextDiff(cur, base, i)
		dst = binary.AppendUvarint(dst, uint64(j-i))
		if j == n {
			break
		}
		end := literalEnd(cur, base, j)
		dst = binary.AppendUvarint(dst, uint64(end-j))
		off := len(dst)
		dst = append(dst, cur[j:end]...)
		if base != nil {
			xorInto(dst[off:], base[j:end])
		}
		i = end
	}
	return dst
}

// literalEnd returns the end of the literal starting at j (where cur and base
// differ): just after the last differing byte that is followed by at least
// MinGap equal bytes or by the end of the frame.
func literalEnd(cur, base []byte, j int) int {
	n := len(cur)
	last := j // last differing byte
	k := j + 1
	// Eight bytes at a time; a gap inside one word is at most 6 bytes, shorter
	// than MinGap, so only gaps spanning words end a literal.
	for ; k+8 <= n; k += 8 {
		d := binary.LittleEndian.Uint64(cur[k:])
		if base != nil {
			d ^= binary.LittleEndian.Uint64(base[k:])
		}
		if d == 0 {
			return last + 1 // bytes k..k+7 equal: a gap of at least 8
		}
		if first := k + bits.TrailingZeros64(d)/8; first-last-1 >= MinGap {
			return last + 1
		}
		last = k + 7 - bits.LeadingZeros64(d)/8
	}
	for ; k < n && k-last <= MinGap; k++ {
		if base == nil && cur[k] != 0 || base != nil && cur[k] != base[k] {
			last = k
		}
	}
	return last + 1
}

func xorInto(dst, src []byte) {
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(dst[i:])^binary.LittleEndian.Uint64(src[i:]))
	}
	for ; i < len(dst); i++ {
		dst[i] ^= src[i]
	}
}

// nextDiff returns the first index ≥ i where cur differs from base (zeros if
// nil), or len(cur).
func nextDiff(cur, base []byte, i int) int {
	n := len(cur)
	if base == nil {
		for ; i+8 <= n; i += 8 {
			if binary.LittleEndian.Uint64(cur[i:]) != 0 {
				break
			}
		}
		for ; i < n && cur[i] == 0; i++ {
		}
		return i
	}
	for ; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(cur[i:]) != binary.LittleEndian.Uint64(base[i:]) {
			break
		}
	}
	for ; i < n && cur[i] == base[i]; i++ {
	}
	return i
}

var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// appendWriter is an io.Writer appending to a slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

type deflater struct {
	fw *flate.Writer
	w  appendWriter
}

// Deflate writers are large (hundreds of KiB), so they are pooled per level and
// shared by all streams rather than kept per stream.
var flateWriters [10]sync.Pool

var (
	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
)

func zstdEncoder() *zstd.Encoder {
	zstdEncOnce.Do(func() {
		var err error
		zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithLowerEncoderMem(true),
			zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true))
		if err != nil {
			panic(err) // only on invalid options
		}
	})
	return zstdEnc
}

func zstdDecoder() *zstd.Decoder {
	zstdDecOnce.Do(func() {
		var err error
		zstdDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(uint64(maxBody(DefaultMaxRawSize))), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err)
		}
	})
	return zstdDec
}

func compress(dst, body []byte, c Compression, level int) ([]byte, error) {
	switch c {
	case Stored:
		return append(dst, body...), nil
	case Deflate:
		d, _ := flateWriters[level].Get().(*deflater)
		if d == nil {
			d = &deflater{}
			var err error
			if d.fw, err = flate.NewWriter(&d.w, level); err != nil {
				return dst, err
			}
		}
		d.w.b = dst
		d.fw.Reset(&d.w)
		_, err := d.fw.Write(body)
		if err == nil {
			err = d.fw.Close()
		}
		out := d.w.b
		d.w.b = nil
		flateWriters[level].Put(d)
		return out, err
	case Zstd:
		return zstdEncoder().EncodeAll(body, dst), nil
	}
	return dst, fmt.Errorf("framecodec: unknown compression %d", c)
}

// Decoder decodes one stream's payloads, keeping the last frame as the base of
// the next delta.
type Decoder struct {
	// MaxRawSize is the largest frame accepted; 0 means DefaultMaxRawSize.
	MaxRawSize int

	frame, next []byte
	have        bool
	body        []byte
}

// Reset forgets the base frame: the next payload must be a keyframe.
func (d *Decoder) Reset() { d.have = false }

// Decode decodes one payload and returns the frame. The frame is owned by the
// decoder and valid until the next call; on error the base is unchanged.
func (d *Decoder) Decode(p []byte) ([]byte, error) {
	h, err := ParseHeader(p)
	if err != nil {
		return nil, err
	}
	limit := d.MaxRawSize
	if limit <= 0 {
		limit = DefaultMaxRawSize
	}
	if h.RawSize > limit {
		return nil, fmt.Errorf("%w: declares %d bytes; the limit is %d", ErrTooLarge, h.RawSize, limit)
	}
	if !h.Keyframe && (!d.have || len(d.frame) != h.RawSize) {
		if !d.have {
			return nil, fmt.Errorf("%w: the first frame of a stream must be a keyframe", ErrNoBase)
		}
		return nil, fmt.Errorf("%w: delta of %d bytes, base is %d bytes", ErrNoBase, h.RawSize, len(d.frame))
	}
	body, err := decompress(d.body[:0], p[HeaderSize:], h.Compression, maxBody(h.RawSize))
	if cap(body) <= 4*maxBody(limit) { // keep the scratch unless it is oversized
		d.body = body[:0]
	}
	if err != nil {
		return nil, err
	}
	if cap(d.next) < h.RawSize {
		d.next = make([]byte, h.RawSize)
	}
	out := d.next[:h.RawSize]
	if h.Keyframe {
		clear(out)
	} else {
		copy(out, d.frame)
	}
	if err := applyRLE(out, body); err != nil {
		return nil, err
	}
	d.next, d.frame, d.have = d.frame, out, true
	return out, nil
}

// applyRLE XORs the run-length coded body into out, which it must fill exactly.
func applyRLE(out, body []byte) error {
	n := len(out)
	pos, r := 0, 0
	uvarint := func(what string) (int, error) {
		v, k := binary.Uvarint(body[r:])
		if k <= 0 {
			if k == 0 {
				return 0, fmt.Errorf("%w: body ends inside a %s at body byte %d", ErrMalformed, what, r)
			}
			return 0, fmt.Errorf("%w: %s overflows at body byte %d", ErrMalformed, what, r)
		}
		if v > uint64(n-pos) {
			return 0, fmt.Errorf("%w: %s of %d at output byte %d runs past the %d-byte frame", ErrMalformed, what, v, pos, n)
		}
		r += k
		return int(v), nil
	}
	for pos < n {
		z, err := uvarint("zero run")
		if err != nil {
			return err
		}
		pos += z
		if pos == n {
			break
		}
		l, err := uvarint("literal length")
		if err != nil {
			return err
		}
		if len(body)-r < l {
			return fmt.Errorf("%w: literal of %d bytes at body byte %d, only %d left", ErrMalformed, l, r, len(body)-r)
		}
		xorInto(out[pos:pos+l], body[r:r+l])
		pos += l
		r += l
	}
	if r != len(body) {
		return fmt.Errorf("%w: %d trailing body bytes after the %d-byte frame", ErrMalformed, len(body)-r, n)
	}
	return nil
}

var flateReaders sync.Pool

func decompress(dst, src []byte, c Compression, limit int) ([]byte, error) {
	switch c {
	case Stored:
		if len(src) > limit {
			return dst, fmt.Errorf("%w: body of %d bytes exceeds %d", ErrTooLarge, len(src), limit)
		}
		return append(dst, src...), nil
	case Deflate:
		br := bytes.NewReader(src)
		fr, _ := flateReaders.Get().(io.ReadCloser)
		if fr == nil {
			fr = flate.NewReader(br)
		} else {
			_ = fr.(flate.Resetter).Reset(br, nil)
		}
		defer flateReaders.Put(fr)
		for {
			if len(dst) == cap(dst) {
				// Grow geometrically, never past limit+1 (one byte more tells "too large").
				dst = slices.Grow(dst, min(max(len(dst), 32<<10), limit+1-len(dst)))
			}
			k, err := fr.Read(dst[len(dst):cap(dst)])
			dst = dst[:len(dst)+k]
			if len(dst) > limit {
				return dst, fmt.Errorf("%w: deflate body exceeds %d bytes", ErrTooLarge, limit)
			}
			if err == io.EOF {
				return dst, nil
			}
			if err != nil {
				return dst, fmt.Errorf("%w: deflate: %v", ErrMalformed, err)
			}
		}
	case Zstd:
		var zh zstd.Header
		if err := zh.Decode(src); err != nil {
			return dst, fmt.Errorf("%w: zstd header: %v", ErrMalformed, err)
		}
		if !zh.HasFCS {
			return dst, fmt.Errorf("%w: zstd frame does not declare its content size", ErrMalformed)
		}
		if zh.FrameContentSize > uint64(limit) {
			return dst, fmt.Errorf("%w: zstd body declares %d bytes, more than %d", ErrTooLarge, zh.FrameContentSize, limit)
		}
		if cap(dst) < int(zh.FrameContentSize) {
			dst = make([]byte, 0, zh.FrameContentSize)
		}
		out, err := zstdDecoder().DecodeAll(src, dst[:0:zh.FrameContentSize])
		if err != nil {
			return dst, fmt.Errorf("%w: zstd: %v", ErrMalformed, err)
		}
		return out, nil
	}
	return dst, fmt.Errorf("%w: unknown compression %d", ErrMalformed, c)
}
