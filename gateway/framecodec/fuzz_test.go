package framecodec

import (
	"encoding/base64"
	"testing"
)

// FuzzDecode: arbitrary payloads, alone or after a valid keyframe, never panic,
// and a decoded frame is never larger than the limit.
func FuzzDecode(f *testing.F) {
	v := vectors{}
	if b, err := readVectorsBytes(); err == nil {
		v = b
	}
	for _, s := range v.Sequences {
		for _, fr := range s.Frames {
			if len(fr.Payload) < 4096 {
				p, _ := base64.StdEncoding.DecodeString(fr.Payload)
				f.Add(p, false)
			}
		}
	}
	for _, c := range v.Invalid {
		p, _ := base64.StdEncoding.DecodeString(c.Payload)
		if len(p) < 4096 {
			f.Add(p, true)
		}
	}
	const limit = 1 << 16
	key, _, _ := NewEncoder(EncoderOptions{Compression: Stored}).Encode(nil, 1, []byte("0123456789abcdef0123456789abcdef"))
	f.Fuzz(func(t *testing.T, p []byte, withBase bool) {
		d := &Decoder{MaxRawSize: limit}
		if withBase {
			if _, err := d.Decode(key); err != nil {
				t.Fatal(err)
			}
		}
		out, err := d.Decode(p)
		if err != nil {
			if out != nil {
				t.Fatal("frame returned with an error")
			}
			return
		}
		if len(out) > limit {
			t.Fatalf("decoded %d bytes past the %d limit", len(out), limit)
		}
		if h, _ := ParseHeader(p); h.RawSize != len(out) {
			t.Fatalf("decoded %d bytes, header says %d", len(out), h.RawSize)
		}
	})
}
