package framecodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/gateway/framecodec/arenatrace"
)

// shortScript is a 3 s version of the bench trace (0.5 s standing, 1 s walking,
// 1.5 s turning): every phase, kept light for -race.
var shortScript = arenatrace.Script{Standing: time.Second / 2, Walking: time.Second, Turning: 3 * time.Second / 2}

var traceOnce = sync.OnceValues(func() ([]int64, [][]byte) {
	ticks, views, err := arenatrace.Frames(shortScript)
	if err != nil {
		panic(err)
	}
	return ticks, views
})

func trace(t testing.TB) ([]int64, [][]byte) {
	t.Helper()
	ticks, views := traceOnce()
	if len(views) != 52 {
		t.Fatalf("trace has %d frames, want 52 (3 s at 17.5 frames/s)", len(views))
	}
	return ticks, views
}

func TestRoundTripArenaTrace(t *testing.T) {
	ticks, views := trace(t)
	for _, c := range []Compression{Stored, Deflate, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			enc := NewEncoder(EncoderOptions{Compression: c, KeyframeTicks: 70})
			dec := &Decoder{}
			var total, keyframes int
			for i, v := range views {
				p, info, err := enc.Encode(nil, ticks[i], v)
				if err != nil {
					t.Fatal(err)
				}
				h, err := ParseHeader(p)
				if err != nil {
					t.Fatal(err)
				}
				if h.Keyframe != info.Keyframe || h.Compression != c || h.RawSize != len(v) {
					t.Fatalf("frame %d: header %+v, info %+v", i, h, info)
				}
				if !info.Keyframe && info.BaseTick != ticks[i-1] {
					t.Fatalf("frame %d: base tick %d, want the previous frame's %d", i, info.BaseTick, ticks[i-1])
				}
				got, err := dec.Decode(p)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(got, v) {
					t.Fatalf("frame %d decodes to a different view", i)
				}
				total += len(p)
				if info.Keyframe {
					keyframes++
				}
			}
			// One keyframe at the start, then every 70 ticks (35 frames).
			if want := (len(views) + 34) / 35; keyframes != want {
				t.Errorf("%d keyframes, want %d", keyframes, want)
			}
			t.Logf("%s: %d frames, %d bytes (%.0f B/frame), %d keyframes", c, len(views), total, float64(total)/float64(len(views)), keyframes)
		})
	}
}

func TestKeyframeCadence(t *testing.T) {
	frame := bytes.Repeat([]byte{1}, 100)
	keys := func(enc *Encoder, ticks ...int64) []bool {
		var out []bool
		for _, tick := range ticks {
			_, info, err := enc.Encode(nil, tick, frame)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, info.Keyframe)
		}
		return out
	}
	eq := func(name string, got []bool, want ...bool) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: keyframes %v, want %v", name, got, want)
			}
		}
	}
	// By frame count (tick rate unknown).
	enc := NewEncoder(EncoderOptions{Compression: Stored, KeyframeFrames: 3})
	eq("frames", keys(enc, 1, 2, 3, 4, 5, 6, 7), true, false, false, true, false, false, true)
	// By ticks: a slow client that skipped frames still gets one every 10 ticks.
	enc = NewEncoder(EncoderOptions{Compression: Stored, KeyframeTicks: 10})
	eq("ticks", keys(enc, 2, 4, 11, 12, 20, 30, 31), true, false, false, true, false, true, false)
	// Reset (re-attach) forces one; so does a tick going backwards or a new size.
	enc.Reset()
	eq("reset", keys(enc, 32, 33), true, false)
	eq("backwards", keys(enc, 20), true)
	if _, info, _ := enc.Encode(nil, 21, frame[:50]); !info.Keyframe {
		t.Fatal("a frame of a new size is not a keyframe")
	}
}

// TestDeltaAgainstLastSent: a delta applies to the last frame the stream sent,
// whatever frames the node skipped in between (a slow client).
func TestDeltaAgainstLastSent(t *testing.T) {
	ticks, views := trace(t)
	enc := NewEncoder(EncoderOptions{Compression: Deflate, KeyframeFrames: 1000})
	dec := &Decoder{}
	sent := []int{0, 1, 5, 6, 20, 21, 22, 40, 51}
	for k, i := range sent {
		p, info, err := enc.Encode(nil, ticks[i], views[i])
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 && (info.Keyframe || info.BaseTick != ticks[sent[k-1]]) {
			t.Fatalf("frame %d: %+v, want a delta on tick %d", i, info, ticks[sent[k-1]])
		}
		got, err := dec.Decode(p)
		if err != nil || !bytes.Equal(got, views[i]) {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	// A delta given to a decoder holding another base would be wrong; a fresh
	// decoder (a reconnected client) refuses it.
	p, _, _ := enc.Encode(nil, ticks[51]+2, views[50])
	if _, err := new(Decoder).Decode(p); !errors.Is(err, ErrNoBase) {
		t.Fatalf("delta on a fresh decoder: %v, want ErrNoBase", err)
	}
}

func TestEncoderDoesNotKeepCallerBuffer(t *testing.T) {
	enc := NewEncoder(EncoderOptions{Compression: Stored})
	dec := &Decoder{}
	buf := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	p1, _, _ := enc.Encode(nil, 1, buf)
	buf[3] = 99 // the caller reuses its buffer (the arena does)
	p2, info, _ := enc.Encode(nil, 2, buf)
	if info.Keyframe {
		t.Fatal("second frame is a keyframe")
	}
	if _, err := dec.Decode(p1); err != nil {
		t.Fatal(err)
	}
	got, err := dec.Decode(p2)
	if err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestMalformed(t *testing.T) {
	frame := bytes.Repeat([]byte("abcdefgh"), 64)
	good, _, _ := NewEncoder(EncoderOptions{Compression: Stored}).Encode(nil, 1, frame)
	with := func(f func(p []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		p    []byte
		err  error
		msg  string
	}{
		{"empty", nil, ErrMalformed, "shorter than the 8-byte header"},
		{"magic", with(func(p []byte) []byte { p[0] = 'X'; return p }), ErrMalformed, "bad magic"},
		{"version", with(func(p []byte) []byte { p[2] = 9; return p }), ErrMalformed, "version 9"},
		{"flags", with(func(p []byte) []byte { p[3] |= 0x80; return p }), ErrMalformed, "unknown flags"},
		{"compression", with(func(p []byte) []byte { p[3] |= 7 << 1; return p }), ErrMalformed, "unknown compression 7"},
		{"oversized", with(func(p []byte) []byte { p[4], p[5], p[6], p[7] = 0xff, 0xff, 0xff, 0xff; return p }), ErrTooLarge, "declares 4294967295 bytes; the limit is 16777216"},
		{"truncated", good[:len(good)-3], ErrMalformed, "only"},
		{"trailing", append(append([]byte(nil), good...), 0), ErrMalformed, "trailing"},
		{"run past end", with(func(p []byte) []byte { p[4], p[5] = 0xff, 0x01; return p }), ErrMalformed, "runs past"},
		{"delta first", with(func(p []byte) []byte { p[3] &^= 1; return p }), ErrNoBase, "must be a keyframe"},
		{"bad deflate", []byte{'L', 'F', 1, 1 | 1<<1, 10, 0, 0, 0, 0xff, 0xff}, ErrMalformed, "deflate"},
		{"bad zstd", []byte{'L', 'F', 1, 1 | 2<<1, 10, 0, 0, 0, 1, 2, 3, 4, 5}, ErrMalformed, "zstd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := new(Decoder).Decode(c.p)
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want %v containing %q", err, c.err, c.msg)
			}
		})
	}
}

// TestBombsRefused: compressed bodies that inflate past 2×raw_size+16 are refused
// without decompressing them whole.
func TestBombsRefused(t *testing.T) {
	zeros := make([]byte, 8<<20)
	for _, c := range []Compression{Deflate, Zstd} {
		body, err := compress(nil, zeros, c, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := appendHeader(nil, Header{Keyframe: true, Compression: c, RawSize: 1000})
		p = append(p, body...)
		if _, err := new(Decoder).Decode(p); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s bomb: %v, want ErrTooLarge", c, err)
		}
	}
	d := &Decoder{MaxRawSize: 100}
	p, _, _ := NewEncoder(EncoderOptions{Compression: Deflate}).Encode(nil, 1, make([]byte, 101))
	if _, err := d.Decode(p); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("101 bytes with a 100-byte limit: %v", err)
	}
}

func TestDecoderKeepsBaseOnError(t *testing.T) {
	enc := NewEncoder(EncoderOptions{Compression: Deflate})
	dec := &Decoder{}
	a, b := bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 1000)
	p1, _, _ := enc.Encode(nil, 1, a)
	p2, _, _ := enc.Encode(nil, 2, b)
	if _, err := dec.Decode(p1); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Decode(p2[:len(p2)-2]); err == nil {
		t.Fatal("truncated delta decoded")
	}
	if got, err := dec.Decode(p2); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("after a failed decode: %v", err)
	}
}

func TestEmptyAndEdgeFrames(t *testing.T) {
	for _, frame := range [][]byte{{}, {0}, {7}, make([]byte, 9), bytes.Repeat([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, 20)} {
		for _, c := range []Compression{Stored, Deflate, Zstd} {
			enc := NewEncoder(EncoderOptions{Compression: c})
			dec := &Decoder{}
			for tick, f := range [][]byte{frame, frame, bytes.Repeat([]byte{3}, len(frame))} {
				p, _, err := enc.Encode(nil, int64(tick), f)
				if err != nil {
					t.Fatal(err)
				}
				got, err := dec.Decode(p)
				if err != nil || !bytes.Equal(got, f) {
					t.Fatalf("%s %v: got %v, %v", c, f, got, err)
				}
			}
		}
	}
}

func BenchmarkEncodeDeflate(b *testing.B) { benchEncode(b, Deflate) }
func BenchmarkEncodeZstd(b *testing.B)    { benchEncode(b, Zstd) }

func benchEncode(b *testing.B, c Compression) {
	ticks, views := trace(b)
	enc := NewEncoder(EncoderOptions{Compression: c, KeyframeTicks: 70})
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % len(views)
		var err error
		buf, _, err = enc.Encode(buf[:0], ticks[k]+int64(i/len(views))*1000, views[k])
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDeflate(b *testing.B) {
	ticks, views := trace(b)
	enc := NewEncoder(EncoderOptions{Compression: Deflate, KeyframeTicks: 70})
	var ps [][]byte
	for i, v := range views {
		p, _, _ := enc.Encode(nil, ticks[i], v)
		ps = append(ps, p)
	}
	dec := &Decoder{}
	for i := 0; b.Loop(); i++ {
		k := i % len(ps)
		if k == 0 {
			dec.Reset()
		}
		if _, err := dec.Decode(ps[k]); err != nil {
			b.Fatal(err)
		}
	}
}

// refRLE is the plain byte-by-byte statement of the encoder's run-length coding.
func refRLE(cur, base []byte) []byte {
	var dst []byte
	b := func(k int) byte {
		if base == nil {
			return 0
		}
		return base[k]
	}
	n := len(cur)
	for i := 0; i < n; {
		j := i
		for j < n && cur[j] == b(j) {
			j++
		}
		dst = binary.AppendUvarint(dst, uint64(j-i))
		if j == n {
			break
		}
		last := j
		for k := j + 1; k < n && k-last <= MinGap; k++ {
			if cur[k] != b(k) {
				last = k
			}
		}
		dst = binary.AppendUvarint(dst, uint64(last+1-j))
		for k := j; k <= last; k++ {
			dst = append(dst, cur[k]^b(k))
		}
		i = last + 1
	}
	return dst
}

func TestRLEMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		n := rng.IntN(200)
		base := make([]byte, n)
		for i := range base {
			base[i] = byte(rng.IntN(3))
		}
		cur := append([]byte(nil), base...)
		// Sparse changes with gaps of every length around MinGap.
		for i := rng.IntN(12); i < n; i += 1 + rng.IntN(20) {
			cur[i] ^= byte(1 + rng.IntN(255))
		}
		for _, b := range [][]byte{base, nil} {
			got, want := appendRLE(nil, cur, b), refRLE(cur, b)
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d base nil=%v:\n got %x\nwant %x", n, b == nil, got, want)
			}
		}
	}
}
