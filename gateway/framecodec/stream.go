package framecodec

import (
	"sync"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Stream encodes the frames of one client stream as the client asked
// (StreamFramesRequest.accept_encodings). It is used by one goroutine.
type Stream struct {
	encoding ludusv1.FrameEncoding
	enc      *Encoder // nil for raw
}

// Negotiate picks the first encoding in accept that the gateway supports; raw
// when accept is empty or names nothing supported.
func Negotiate(accept []ludusv1.FrameEncoding) ludusv1.FrameEncoding {
	for _, e := range accept {
		switch e {
		case ludusv1.FrameEncoding_FRAME_ENCODING_RAW, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE,
			ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD:
			return e
		}
	}
	return ludusv1.FrameEncoding_FRAME_ENCODING_RAW
}

// NewStream returns the encoder state of one client stream.
func NewStream(accept []ludusv1.FrameEncoding) *Stream {
	s := &Stream{encoding: Negotiate(accept)}
	switch s.encoding {
	case ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE:
		s.enc = NewEncoder(EncoderOptions{Compression: Deflate})
	case ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD:
		s.enc = NewEncoder(EncoderOptions{Compression: Zstd})
	}
	return s
}

// Encoding is the negotiated encoding.
func (s *Stream) Encoding() ludusv1.FrameEncoding { return s.encoding }

// Status notes a status message of the stream: once the tick rate is known,
// keyframes are sent every 2 s of game time.
func (s *Stream) Status(st *ludusv1.Status) {
	if s.enc != nil && st != nil && st.TickRate > 0 {
		s.enc.SetKeyframeTicks(2 * int64(st.TickRate))
	}
}

// Reattached makes the next frame a keyframe; call it when the stream's frames
// start coming from another node (handoff, failover).
func (s *Stream) Reattached() {
	if s.enc != nil {
		s.enc.Reset()
	}
}

// MemoryBytes is what the stream holds between frames (its delta base).
func (s *Stream) MemoryBytes() int {
	if s.enc == nil {
		return 0
	}
	return s.enc.MemoryBytes()
}

var payloadPool = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// Send encodes f and passes the encoded frame to send, which must not keep it
// (connect's Send marshals before returning): its view is a pooled buffer. If
// send fails the next frame is a keyframe. f is not modified.
func (s *Stream) Send(f *ludusv1.Frame, send func(*ludusv1.Frame) error) error {
	if s.enc == nil {
		return send(f) // raw: the view as the node sent it
	}
	bp := payloadPool.Get().(*[]byte)
	defer payloadPool.Put(bp)
	out, info, err := s.enc.Encode((*bp)[:0], f.Tick, f.View)
	*bp = out[:0]
	if err != nil {
		return err
	}
	err = send(&ludusv1.Frame{Tick: f.Tick, View: out, Encoding: s.encoding, Keyframe: info.Keyframe,
		BaseTick: info.BaseTick, RawSize: uint32(info.RawSize)})
	if err != nil {
		s.enc.Reset()
	}
	return err
}
