package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ticket constants. They are part of the ticket format (see the package doc).
const (
	// TicketIssuer is the iss claim of every ticket.
	TicketIssuer = "ludus"
	// TicketAudience is the single aud entry of every ticket.
	TicketAudience = "ludus-gateway"
	// TicketType is the typ header of every ticket.
	TicketType = "ludus-session+jwt"
	// TicketTTL is how long a ticket is valid after it is issued.
	TicketTTL = 120 * time.Second
	// Leeway is the clock skew tolerated when checking exp and nbf.
	Leeway = 5 * time.Second
	// KeyRetention is how long a retired key stays published: long enough for
	// the last ticket it signed to expire.
	KeyRetention = TicketTTL + Leeway
)

// Errors of the key set.
var (
	// ErrNoSigningKey is returned when a KeySet has no current key to sign with.
	ErrNoSigningKey = errors.New("auth: no current signing key")
	// ErrUnknownKey is wrapped by KeySource errors for a kid they do not know.
	ErrUnknownKey = errors.New("unknown signing key")
)

// KeySource finds the public key a ticket names in its kid header.
// Implementations return an error wrapping ErrUnknownKey for an unknown kid,
// and one wrapping ErrKeysUnavailable if the keys cannot be obtained.
type KeySource interface {
	Key(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// SigningKey is one Ed25519 key of a KeySet, with its life cycle.
type SigningKey struct {
	// ID is the kid; keys made by GenerateKey use their RFC 7638 thumbprint.
	ID      string
	Private ed25519.PrivateKey
	// CreatedAt is when the key was made (and started signing).
	CreatedAt time.Time
	// RetiredAt is when the key stopped signing; zero while it is current.
	RetiredAt time.Time
}

// Public returns the public half of the key.
func (k SigningKey) Public() ed25519.PublicKey {
	return k.Private.Public().(ed25519.PublicKey)
}

// GenerateKey makes a fresh signing key created at now, named by its thumbprint.
func GenerateKey(now time.Time) (SigningKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return SigningKey{}, fmt.Errorf("auth: generate key: %w", err)
	}
	return SigningKey{ID: Thumbprint(pub), Private: priv, CreatedAt: now}, nil
}

// Thumbprint is the RFC 7638 JWK thumbprint (SHA-256, base64url without
// padding) of an Ed25519 public key.
func Thumbprint(pub ed25519.PublicKey) string {
	// RFC 7638 §3.2: required members in lexicographic order, no whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(pub) + `"}`))
	return b64.EncodeToString(sum[:])
}

var b64 = base64.RawURLEncoding

// MarshalPrivate encodes an Ed25519 private key as PKCS #8 DER, the form the
// backend persists.
func MarshalPrivate(k ed25519.PrivateKey) ([]byte, error) {
	if len(k) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("auth: private key has %d bytes, want %d", len(k), ed25519.PrivateKeySize)
	}
	return x509.MarshalPKCS8PrivateKey(k)
}

// ParsePrivate decodes a key written by MarshalPrivate.
func ParsePrivate(der []byte) (ed25519.PrivateKey, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("auth: parse private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("auth: private key is %T, not Ed25519", k)
	}
	return priv, nil
}

// KeySet is the set of signing keys of a backend. It is safe for concurrent
// use; reads (signing, Key, PublicJWKS) take no lock.
//
// A KeySet also is a KeySource that follows rotations, for in-process
// verification.
type KeySet struct {
	now   func() time.Time
	mu    sync.Mutex // serializes writers
	state atomic.Pointer[keyState]
}

// keyState is an immutable snapshot of a KeySet.
type keyState struct {
	keys    []SigningKey // oldest first; the current key, if any, is last
	current *SigningKey
	byID    map[string]*SigningKey
}

func newKeyState(keys []SigningKey) *keyState {
	st := &keyState{keys: keys, byID: make(map[string]*SigningKey, len(keys))}
	for i := range keys {
		k := &keys[i]
		st.byID[k.ID] = k
		if k.RetiredAt.IsZero() {
			st.current = k
		}
	}
	return st
}

// published reports whether k is still served at time now.
func published(k *SigningKey, now time.Time) bool {
	return k.RetiredAt.IsZero() || now.Before(k.RetiredAt.Add(KeyRetention))
}

// NewKeySet builds a key set from stored keys (in any order); it may be empty.
// If several keys claim to be current, the newest is, and the others count as
// retired when it was created. now is the clock (time.Now if nil).
func NewKeySet(now func() time.Time, keys ...SigningKey) (*KeySet, error) {
	if now == nil {
		now = time.Now
	}
	ks, err := orderKeys(keys)
	if err != nil {
		return nil, err
	}
	set := &KeySet{now: now}
	set.state.Store(newKeyState(ks))
	return set, nil
}

// Replace makes the set exactly keys, as NewKeySet would build it: a backend
// replica follows the keys its store holds, which another replica may have
// rotated.
func (s *KeySet) Replace(keys ...SigningKey) error {
	ks, err := orderKeys(keys)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Store(newKeyState(ks))
	return nil
}

// orderKeys checks keys and orders them for a keyState: retired keys, then
// current ones, each group by creation time; of several current keys the
// newest is, and the others count as retired when it was created.
func orderKeys(keys []SigningKey) ([]SigningKey, error) {
	ks := make([]SigningKey, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("auth: duplicate key id %q", k.ID)
		}
		seen[k.ID] = true
		ks = append(ks, k)
	}
	slices.SortStableFunc(ks, func(a, b SigningKey) int {
		if ac, bc := a.RetiredAt.IsZero(), b.RetiredAt.IsZero(); ac != bc {
			if ac {
				return 1
			}
			return -1
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID) // every replica picks the same current key
	})
	var cur *SigningKey
	for i := len(ks) - 1; i >= 0; i-- {
		if !ks[i].RetiredAt.IsZero() {
			break
		}
		if cur == nil {
			cur = &ks[i]
		} else {
			ks[i].RetiredAt = cur.CreatedAt
		}
	}
	return ks, nil
}

func checkKey(k SigningKey) error {
	switch {
	case k.ID == "" || len(k.ID) > 128:
		return fmt.Errorf("auth: key id must be 1..128 bytes, got %q", k.ID)
	case len(k.Private) != ed25519.PrivateKeySize:
		return fmt.Errorf("auth: key %q: private key has %d bytes, want %d", k.ID, len(k.Private), ed25519.PrivateKeySize)
	case k.CreatedAt.IsZero():
		return fmt.Errorf("auth: key %q has no creation time", k.ID)
	}
	return nil
}

// Current returns the key that signs new tickets.
func (s *KeySet) Current() (SigningKey, bool) {
	if c := s.state.Load().current; c != nil {
		return *c, true
	}
	return SigningKey{}, false
}

// Keys returns every key of the set, oldest first, including retired keys
// not yet pruned.
func (s *KeySet) Keys() []SigningKey {
	return slices.Clone(s.state.Load().keys)
}

// Rotate generates a key and makes it current (see RotateTo).
func (s *KeySet) Rotate() (SigningKey, error) {
	k, err := GenerateKey(s.now())
	if err != nil {
		return SigningKey{}, err
	}
	return k, s.RotateTo(k)
}

// RotateTo makes k, a fresh key with no RetiredAt, the current key. The
// previous current key is retired at k.CreatedAt and stays published for
// KeyRetention after that. Callers that persist keys store k (and the retired
// key) first, then call RotateTo, so no ticket is ever signed by a key that a
// restart would lose.
func (s *KeySet) RotateTo(k SigningKey) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if !k.RetiredAt.IsZero() {
		return fmt.Errorf("auth: key %q is retired", k.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	if _, dup := old.byID[k.ID]; dup {
		return fmt.Errorf("auth: duplicate key id %q", k.ID)
	}
	keys := make([]SigningKey, 0, len(old.keys)+1)
	keys = append(keys, old.keys...)
	for i := range keys {
		if keys[i].RetiredAt.IsZero() {
			keys[i].RetiredAt = k.CreatedAt
		}
	}
	keys = append(keys, k)
	s.state.Store(newKeyState(keys))
	return nil
}

// Prune removes retired keys whose retention is over and returns their ids.
func (s *KeySet) Prune() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	old := s.state.Load()
	var pruned []string
	keys := make([]SigningKey, 0, len(old.keys))
	for i := range old.keys {
		if published(&old.keys[i], now) {
			keys = append(keys, old.keys[i])
		} else {
			pruned = append(pruned, old.keys[i].ID)
		}
	}
	if len(pruned) > 0 {
		s.state.Store(newKeyState(keys))
	}
	return pruned
}

// Key returns the public key kid if it is published: current, or retired less
// than KeyRetention ago. It makes KeySet a KeySource.
func (s *KeySet) Key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	k, ok := s.state.Load().byID[kid]
	if !ok || !published(k, s.now()) {
		return nil, fmt.Errorf("%w %s", ErrUnknownKey, quoteID(kid))
	}
	return k.Public(), nil
}

// Public returns a snapshot of the published public keys.
func (s *KeySet) Public() StaticKeys {
	now := s.now()
	st := s.state.Load()
	out := make(StaticKeys, len(st.keys))
	for i := range st.keys {
		if published(&st.keys[i], now) {
			out[st.keys[i].ID] = st.keys[i].Public()
		}
	}
	return out
}

// signer returns the current key for the Issuer.
func (s *KeySet) signer() (*SigningKey, error) {
	if c := s.state.Load().current; c != nil {
		return c, nil
	}
	return nil, ErrNoSigningKey
}

// quoteID quotes an untrusted id for an error message, shortened.
func quoteID(id string) string {
	const max = 64
	if len(id) > max {
		return fmt.Sprintf("%q...", id[:max])
	}
	return fmt.Sprintf("%q", id)
}
