package framecodec

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		accept []ludusv1.FrameEncoding
		want   ludusv1.FrameEncoding
	}{
		{nil, ludusv1.FrameEncoding_FRAME_ENCODING_RAW},
		{[]ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_UNSPECIFIED, 99}, ludusv1.FrameEncoding_FRAME_ENCODING_RAW},
		{[]ludusv1.FrameEncoding{99, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD},
		{[]ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE},
	} {
		if got := Negotiate(c.accept); got != c.want {
			t.Errorf("Negotiate(%v) = %v, want %v", c.accept, got, c.want)
		}
	}
}

// TestStream: what the gateway does per client stream — raw frames untouched
// for clients that ask for nothing, keyframe + deltas otherwise, a keyframe after
// a re-attach or a failed send, keyframes every 2 s of ticks once the rate is known.
func TestStream(t *testing.T) {
	ticks, views := trace(t)
	raw := NewStream(nil)
	in := &ludusv1.Frame{Tick: 2, View: views[0]}
	if err := raw.Send(in, func(f *ludusv1.Frame) error {
		if f != in {
			t.Fatal("raw frame was rewritten")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	s := NewStream([]ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE})
	s.Status(&ludusv1.Status{TickRate: 10}) // keyframes every 20 ticks
	dec := &Decoder{}
	var got []*ludusv1.Frame
	send := func(i int, fail bool) {
		t.Helper()
		err := s.Send(&ludusv1.Frame{Tick: ticks[i], View: views[i]}, func(f *ludusv1.Frame) error {
			if fail {
				return errors.New("client gone")
			}
			got = append(got, proto.Clone(f).(*ludusv1.Frame)) // the view is a pooled buffer
			return nil
		})
		if (err != nil) != fail {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ { // ticks 2..16
		send(i, false)
	}
	send(8, true) // a failed send: the client may not have it
	send(9, false)
	s.Reattached()
	send(10, false)
	send(11, false)
	wantKey := []bool{true, false, false, false, false, false, false, false, true, true, false}
	var prevTick int64
	for i, f := range got {
		if f.Encoding != ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE || f.Keyframe != wantKey[i] {
			t.Fatalf("frame %d (tick %d): encoding %v keyframe %v, want keyframe %v", i, f.Tick, f.Encoding, f.Keyframe, wantKey[i])
		}
		if !f.Keyframe && f.BaseTick != prevTick {
			t.Fatalf("frame %d: base tick %d, want %d", i, f.BaseTick, prevTick)
		}
		if int(f.RawSize) != len(views[0]) {
			t.Fatalf("raw size %d", f.RawSize)
		}
		v, err := dec.Decode(f.View)
		if err != nil {
			t.Fatal(err)
		}
		j := i
		if i >= 8 {
			j = i + 1 // frame 8 was never delivered
		}
		if !bytes.Equal(v, views[j]) {
			t.Fatalf("frame %d decodes wrong", i)
		}
		prevTick = f.Tick
	}
	if m := s.MemoryBytes(); m != len(views[0]) {
		t.Errorf("stream holds %d bytes between frames, want one frame (%d)", m, len(views[0]))
	}
}
