// Package inputlog encodes the chunks of a game's input log: the events applied
// at each tick (joins, leaves, inputs with the client's sequence number) and the
// state hashes the owner recorded. A chunk covers a contiguous range of ticks;
// replaying every chunk in order from the game's seed rebuilds the game exactly.
//
// Chunks are stored in etcd and later in the backend; Decode treats its input as
// untrusted and never panics (see FuzzDecode).
package inputlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"ludus.dev/ludus/sdk/abi"
)

// formatVersion is the first byte of every encoded chunk.
const formatVersion = 1

// Limits that keep a decoded chunk bounded whatever its bytes say.
const (
	maxEntries  = 1 << 16
	maxHashes   = 1 << 14
	maxAccount  = 128
	maxChunkLen = 1536 << 10 // etcd's request limit
)

// Entry is one event applied at a tick.
type Entry struct {
	// Tick is the tick the event was applied before stepping: after replaying
	// ticks [0, Tick), the event is part of the input of step number Tick.
	Tick  int64
	Event abi.Event
	// Account is the account behind a join (empty for others and for bots).
	Account string
	// Seq is the client's sequence number of an input (0 when not an input).
	Seq uint64
}

// Hash is a state hash recorded after stepping tick Tick (i.e. after Tick steps).
type Hash struct {
	Tick int64
	Hash uint64
}

// Chunk is a contiguous piece of the log: ticks [From, To).
type Chunk struct {
	From, To int64
	Entries  []Entry
	Hashes   []Hash
	// Ended is set on the last chunk of a game that ended normally.
	Ended bool
}

// ErrCorrupt is wrapped by every Decode error.
var ErrCorrupt = errors.New("inputlog: corrupt chunk")

// Encode appends the encoding of c to dst.
func Encode(dst []byte, c *Chunk) []byte {
	dst = append(dst, formatVersion)
	flags := byte(0)
	if c.Ended {
		flags |= 1
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, c.From)
	dst = binary.AppendUvarint(dst, uint64(c.To-c.From))
	dst = binary.AppendUvarint(dst, uint64(len(c.Entries)))
	prev := c.From
	for _, e := range c.Entries {
		dst = binary.AppendUvarint(dst, uint64(e.Tick-prev))
		prev = e.Tick
		dst = append(dst, byte(e.Event.Kind), e.Event.Slot)
		dst = binary.AppendUvarint(dst, e.Seq)
		dst = binary.AppendUvarint(dst, uint64(len(e.Account)))
		dst = append(dst, e.Account...)
		dst = binary.AppendUvarint(dst, uint64(len(e.Event.Payload)))
		dst = append(dst, e.Event.Payload...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.Hashes)))
	prev = c.From
	for _, h := range c.Hashes {
		dst = binary.AppendUvarint(dst, uint64(h.Tick-prev))
		prev = h.Tick
		dst = binary.LittleEndian.AppendUint64(dst, h.Hash)
	}
	return dst
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("%s of %d bytes runs past the end", what, n)
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// Decode parses a chunk. Payloads alias b.
func Decode(b []byte) (*Chunk, error) {
	if len(b) > maxChunkLen {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrCorrupt, len(b), maxChunkLen)
	}
	if len(b) < 2 || b[0] != formatVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrCorrupt)
	}
	c := &Chunk{Ended: b[1]&1 != 0}
	r := &reader{b: b[2:]}
	c.From = r.varint("start tick")
	span := r.uvarint("tick span")
	if r.err == nil && (c.From < 0 || span > 1<<40) {
		r.fail("tick range %d+%d", c.From, span)
	}
	c.To = c.From + int64(span)
	n := r.uvarint("entry count")
	if n > maxEntries || n > uint64(len(r.b)) {
		r.fail("%d entries", n)
	}
	if r.err == nil {
		c.Entries = make([]Entry, 0, n)
	}
	tick := c.From
	for i := uint64(0); i < n && r.err == nil; i++ {
		tick += int64(r.uvarint("tick delta"))
		kind := r.bytes(2, "event header")
		seq := r.uvarint("seq")
		acc := r.bytes(r.uvarint("account length"), "account")
		pl := r.bytes(r.uvarint("payload length"), "payload")
		if r.err != nil {
			break
		}
		if len(acc) > maxAccount || len(pl) > abi.MaxPayload {
			r.fail("oversized entry")
			break
		}
		if tick < c.From || tick >= c.To {
			r.fail("entry at tick %d outside [%d, %d)", tick, c.From, c.To)
			break
		}
		c.Entries = append(c.Entries, Entry{
			Tick:    tick,
			Event:   abi.Event{Kind: abi.EventKind(kind[0]), Slot: kind[1], Payload: pl},
			Account: string(acc),
			Seq:     seq,
		})
	}
	nh := r.uvarint("hash count")
	if nh > maxHashes || nh*9 > uint64(len(r.b)) {
		r.fail("%d hashes", nh)
	}
	tick = c.From
	for i := uint64(0); i < nh && r.err == nil; i++ {
		tick += int64(r.uvarint("hash tick delta"))
		h := r.bytes(8, "hash")
		if r.err != nil {
			break
		}
		if tick > c.To {
			r.fail("hash at tick %d past the chunk end %d", tick, c.To)
			break
		}
		c.Hashes = append(c.Hashes, Hash{Tick: tick, Hash: binary.LittleEndian.Uint64(h)})
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return c, nil
}
