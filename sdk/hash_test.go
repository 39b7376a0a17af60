package sdk

import (
	"hash/fnv"
	"math/rand/v2"
	"testing"
)

func TestHash(t *testing.T) {
	for in, want := range map[string]uint64{
		"":       0xcbf29ce484222325,
		"a":      0xaf63dc4c8601ec8c,
		"foobar": 0x85944171f73967e8,
	} {
		if got := HashBytes([]byte(in)); got != want {
			t.Errorf("HashBytes(%q) = %#x, want %#x", in, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100; i++ {
		u32, u64, b := rng.Uint32(), rng.Uint64(), byte(rng.IntN(256))
		ref := fnv.New64a()
		ref.Write([]byte{b, byte(u32), byte(u32 >> 8), byte(u32 >> 16), byte(u32 >> 24)})
		for k := 0; k < 8; k++ {
			ref.Write([]byte{byte(u64 >> (8 * k))})
		}
		if got := NewHash().Byte(b).Uint32(u32).Uint64(u64).Sum(); got != ref.Sum64() {
			t.Fatalf("incremental hash %#x, hash/fnv %#x", got, ref.Sum64())
		}
	}
}
