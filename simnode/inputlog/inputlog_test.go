package inputlog

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"ludus.dev/ludus/sdk/abi"
)

func sample() *Chunk {
	return &Chunk{
		From: 70, To: 79,
		Entries: []Entry{
			{Tick: 70, Event: abi.Event{Kind: abi.EventJoin, Slot: 0, Payload: []byte("ada")}, Account: "acc-1"},
			{Tick: 72, Event: abi.Event{Kind: abi.EventInput, Slot: 0, Payload: []byte{5}}, Seq: 1},
			{Tick: 72, Event: abi.Event{Kind: abi.EventInput, Slot: 1, Payload: []byte{}}, Seq: 9},
			{Tick: 78, Event: abi.Event{Kind: abi.EventLeave, Slot: 0, Payload: []byte{}}},
		},
		Hashes: []Hash{{Tick: 70, Hash: 1}, {Tick: 79, Hash: 0xFFFFFFFFFFFFFFFF}},
		Ended:  true,
	}
}

func TestRoundTrip(t *testing.T) {
	c := sample()
	b := Encode(nil, c)
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if !bytes.Equal(Encode(nil, got), b) {
		t.Fatal("re-encoding differs")
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	b := Encode(nil, sample())
	for i := 0; i < len(b); i++ {
		if _, err := Decode(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: decoded without error", i)
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
	}
	if _, err := Decode(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	bad := append([]byte(nil), b...)
	bad[0] = 99
	if _, err := Decode(bad); err == nil {
		t.Fatal("unknown version accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, sample()))
	f.Add(Encode(nil, &Chunk{From: 0, To: 1}))
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to something that decodes the same.
		again, err := Decode(Encode(nil, c))
		if err != nil {
			t.Fatalf("re-encoded chunk does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("unstable: %+v vs %+v", again, c)
		}
	})
}
