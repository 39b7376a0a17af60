package sdk

// FNV-1a 64 constants.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Hash is an incremental FNV-1a 64 hash for StateHash implementations; the zero
// value is not ready, start with NewHash. It is a value type so hashing never
// allocates.
type Hash uint64

// NewHash returns an empty hash.
func NewHash() Hash { return fnvOffset }

// Byte mixes in one byte.
func (h Hash) Byte(b byte) Hash { return (h ^ Hash(b)) * fnvPrime }

// Bytes mixes in b.
func (h Hash) Bytes(b []byte) Hash {
	for _, c := range b {
		h = (h ^ Hash(c)) * fnvPrime
	}
	return h
}

// Uint32 mixes in v, little-endian.
func (h Hash) Uint32(v uint32) Hash {
	for i := 0; i < 4; i++ {
		h = (h ^ Hash(byte(v>>(8*i)))) * fnvPrime
	}
	return h
}

// Uint64 mixes in v, little-endian.
func (h Hash) Uint64(v uint64) Hash {
	for i := 0; i < 8; i++ {
		h = (h ^ Hash(byte(v>>(8*i)))) * fnvPrime
	}
	return h
}

// Sum returns the hash value.
func (h Hash) Sum() uint64 { return uint64(h) }

// HashBytes returns the FNV-1a 64 hash of b.
func HashBytes(b []byte) uint64 { return NewHash().Bytes(b).Sum() }
